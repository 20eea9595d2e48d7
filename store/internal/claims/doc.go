// Package claims holds what the store dialects' claims share: how many free
// rows a claim may look at, and how it picks the claimable ones among them.
//
// A claim looks at free rows (neither leased nor waiting for a retry) in id
// order and takes those whose key is not held (no live lease holds it and
// none of its rows waits for a retry). A row whose retry has come due is
// taken alone, without the rows of its key behind it: it failed before and
// may well fail again, and then the rows behind it would only be read and
// handed back. The held keys are read first and the
// free rows after, both against one clock reading: a key released in
// between (a relay's Complete commits) is skipped by this claim, never
// claimed ahead of the row it released, and a retry that comes due in
// between counts as not yet due in both reads.
package claims
