package relay

// Validate reports whether New would accept c: nil, or the error New would
// return, naming the field. Zero fields take their defaults first, as in
// New. Callers that do work before New (create a stream, open a database)
// call it first, so a bad setting fails before anything happens.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}
