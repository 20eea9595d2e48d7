// Package failgroup groups dead letters by the cause of their failure, so
// that a thousand messages failing for one reason are one line to look at,
// replay or discard, not a thousand.
//
// A failure's cause ([Cause]) is its side (relay or consumer), for a
// consumer's parked message the consumer, the reason it parked it and,
// when the handler panicked, the panic's site, and the error without what
// differs between messages failing alike ([Normalize]): ids, numbers,
// sizes and quoted texts. Its fingerprint ([Cause.ID]) names the group in
// the dashboard's links and in courier dlq --group, and is the same in
// every process.
//
// [Collect] reads the summaries of a database's dead letters through
// store.Admin (never a payload) and returns their groups with their
// counts, first and last failures, topics, consumers and members' ids.
// Both the dashboard and the courier CLI group with it.
//
// Only the first store.ErrorPreview characters of an error count: two
// errors alike up to there are one group.
package failgroup
