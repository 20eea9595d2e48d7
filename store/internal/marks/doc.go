// Package marks holds what the dialects' inboxes share to mark a group of
// messages in one statement (store.GroupInbox): turning the ids a
// statement inserted into the fresh flags MarkGroup returns.
package marks
