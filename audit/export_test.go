package audit

// Remembering returns how many message ids, keys, copies and broker
// offsets w holds, and the length of its queue of what to forget.
func (w *Watcher) Remembering() (ids, keys, copies, offsets, queued int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen), len(w.last), len(w.copies), len(w.offsets), len(w.forget) + len(w.offsetsQ)
}
