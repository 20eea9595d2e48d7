package claims

import (
	"encoding/json"
	"fmt"

	"github.com/courier-go/courier/store"
)

// Window is the most free rows a claim of limit rows looks at. Rows of held
// keys are skipped as they are met, so a held key's backlog costs a claim a
// scan over that backlog and no more: other keys' rows behind up to Window
// free rows of held keys are still claimed. The scan stops as soon as limit
// rows are picked. A claim that finds nothing to take (every pending row's
// key is held, as while one hot key drains) scans the whole window, so the
// window is a bound on that cost too: 25,000 rows by default, a few
// milliseconds.
func Window(limit int) int { return max(25*limit, 25_000) }

// Picker picks, in id order, the rows whose key is not held, up to a limit.
// It also notes the rows it is offered whose key a dead letter holds
// (Hold), which the claim moves to courier_outbox_held.
type Picker struct {
	held    map[string]struct{}
	holding map[string]int64 // key → the id of the dead letter that holds it
	moves   []Move
	alone   map[string]struct{} // keys whose retried row was picked
	limit   int
	ids     []int64
	rowKeys []string
	// Examined counts the rows offered.
	Examined int
}

// NewPicker returns a Picker of at most limit rows that skips the keys in
// held.
func NewPicker(held map[string]struct{}, limit int) *Picker {
	return &Picker{held: held, limit: limit}
}

// Move is a row to move to courier_outbox_held, behind the dead letter
// Cause that holds its key.
type Move struct {
	ID, Cause int64
	Key       string
}

// MovesJSON encodes moves as the JSON array the MySQL and SQLite
// statements that move rows to courier_outbox_held read:
// [{"id": …, "cause": …}, …].
func MovesJSON(moves []Move) (string, error) {
	type move struct {
		ID    int64 `json:"id"`
		Cause int64 `json:"cause"`
	}
	ms := make([]move, len(moves))
	for i, m := range moves {
		ms[i] = move{m.ID, m.Cause}
	}
	b, err := json.Marshal(ms)
	return string(b), err
}

// Hold makes the picker skip the keys of holding, a map of each key a dead
// letter holds to that dead letter's id, and note their rows as moves.
func (p *Picker) Hold(holding map[string]int64) { p.holding = holding }

// Moves returns the rows offered whose key a dead letter holds (Hold), in
// id order.
func (p *Picker) Moves() []Move { return p.moves }

// KeepMoves keeps the moves whose key holding still holds, behind its
// current cause: the dead letters read again under the claim's lock.
func (p *Picker) KeepMoves(holding map[string]int64) {
	n := 0
	for _, m := range p.moves {
		if cause, ok := holding[m.Key]; ok {
			p.moves[n] = Move{ID: m.ID, Cause: cause, Key: m.Key}
			n++
		}
	}
	p.moves = p.moves[:n]
}

// Offer considers the free row id of key, offered in id order, and reports
// whether the picker is full (the scan can stop). retried says the row
// failed before and its retry has come due.
func (p *Picker) Offer(id int64, key string, retried bool) (full bool) {
	p.Examined++
	if cause, ok := p.holding[key]; ok {
		p.moves = append(p.moves, Move{ID: id, Cause: cause, Key: key})
		return false
	}
	_, held := p.held[key]
	_, alone := p.alone[key]
	if !held && !alone {
		p.ids = append(p.ids, id)
		p.rowKeys = append(p.rowKeys, key)
		if retried {
			if p.alone == nil {
				p.alone = make(map[string]struct{})
			}
			p.alone[key] = struct{}{}
		}
	}
	return len(p.ids) >= p.limit
}

// Drop removes the picked rows whose key is in held: keys that became held
// after the rows were picked.
func (p *Picker) Drop(held map[string]struct{}) {
	if len(held) == 0 {
		return
	}
	n := 0
	for i, k := range p.rowKeys {
		if _, ok := held[k]; ok {
			continue
		}
		p.ids[n], p.rowKeys[n] = p.ids[i], k
		n++
	}
	p.ids, p.rowKeys = p.ids[:n], p.rowKeys[:n]
}

// Holds reports whether any picked row's key is in held.
func (p *Picker) Holds(held map[string]struct{}) bool {
	for _, k := range p.rowKeys {
		if _, ok := held[k]; ok {
			return true
		}
	}
	return false
}

// IDs returns the picked rows' ids in id order.
func (p *Picker) IDs() []int64 { return p.ids }

// Keys returns the picked rows' distinct keys in order of first appearance.
func (p *Picker) Keys() []string {
	seen := make(map[string]struct{}, len(p.rowKeys))
	keys := make([]string, 0, len(p.rowKeys))
	for _, k := range p.rowKeys {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			keys = append(keys, k)
		}
	}
	return keys
}

// JSON returns the picked rows' ids and distinct keys as JSON arrays, as a
// lease records them on the dialects whose lease columns hold JSON.
func (p *Picker) JSON() (ids, keys []byte, err error) {
	if ids, err = json.Marshal(p.ids); err != nil {
		return nil, nil, err
	}
	if keys, err = json.Marshal(p.Keys()); err != nil {
		return nil, nil, err
	}
	return ids, keys, nil
}

// Run checks a claim's limit and runs claim, whose errors it wraps with
// dialect's name ("mysql: claim: …").
func Run(dialect string, limit int, claim func() (store.Batch, error)) (store.Batch, error) {
	if limit < 1 {
		return store.Batch{}, fmt.Errorf("%s: claim: limit is %d: use 1 or more", dialect, limit)
	}
	batch, err := claim()
	if err != nil {
		return store.Batch{}, fmt.Errorf("%s: claim: %w", dialect, err)
	}
	return batch, nil
}
