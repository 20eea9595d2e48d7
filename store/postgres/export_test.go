package postgres

// What the tests of the table-less messages' format look at.
var (
	LogPrefix        = logPrefix
	LogTableSQL      = logTableSQL
	DecodeLogMessage = decodeLogMessage
	EncodeLogMessage = encodeLogMessage
)
