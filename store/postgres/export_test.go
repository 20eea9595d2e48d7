package postgres

// What the tests of the table-less messages' format look at.
var (
	LogPrefix        = logPrefix
	LogTableSQL      = logTableSQL
	DecodeLogMessage = decodeLogMessage
	EncodeLogMessage = encodeLogMessage
)

// FloorOf returns the scan floor of st, a store of this package.
func FloorOf(st any) int64 {
	f := &st.(*relayStore).floor
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.safe
}
