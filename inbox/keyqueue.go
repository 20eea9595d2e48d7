package inbox

import (
	"sync"
	"time"
)

// keyQueue holds the deliveries a consumer that keeps order has received
// and not yet handled, a queue per key, and hands them to its workers: any
// key's next delivery to any idle worker, but never two deliveries of one
// key at once, and a key's deliveries in the order received. A key that
// waits (a failing message retried in place, a row lock held elsewhere)
// holds back only its own deliveries; the others go on, until the queue
// holds max deliveries and put waits for room.
type keyQueue struct {
	max int

	mu       sync.Mutex
	cond     *sync.Cond
	waiting  map[string][]job // per key, in order received; absent when none
	busy     map[string]bool  // keys whose delivery a worker is handling
	ready    []string         // keys with deliveries waiting and none handled, oldest first
	held     int              // deliveries put and not yet done
	closed   bool
	handling int // deliveries being handled
}

func newKeyQueue(max int) *keyQueue {
	q := &keyQueue{max: max, waiting: make(map[string][]job), busy: make(map[string]bool)}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// put queues j behind the earlier deliveries of its key. It waits while the
// queue is full, and returns false if it was closed meanwhile.
func (q *keyQueue) put(j job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.held >= q.max && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return false
	}
	k := j.msg.Key
	q.waiting[k] = append(q.waiting[k], j)
	q.held++
	if !q.busy[k] && len(q.waiting[k]) == 1 {
		q.ready = append(q.ready, k)
		q.cond.Broadcast()
	}
	return true
}

// take returns the next delivery of the key that has waited longest, and
// marks the key busy until done. After close it returns what is left, then
// false once nothing is left or being handled.
func (q *keyQueue) take() (job, bool) {
	g, ok := q.takeGroup(1, 0)
	if !ok {
		return job{}, false
	}
	return g[0], true
}

// takeGroup returns up to max deliveries, the keys' that have waited
// longest first, each key's consecutive deliveries in the order received,
// and marks their keys busy until done. It waits for a first delivery;
// then, while it has fewer than max, up to wait for more (0: it takes what
// waits and returns), adding the later deliveries of its keys too. After
// close it returns what is left, then false once nothing is left or being
// handled.
func (q *keyQueue) takeGroup(max int, wait time.Duration) ([]job, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !(q.closed && q.handling == 0) {
		q.cond.Wait()
	}
	if len(q.ready) == 0 {
		return nil, false
	}
	var g []job
	var keys []string // the keys of g, in the order taken
	g, keys = q.fill(g, keys, max)
	if len(g) < max && wait > 0 {
		deadline := time.Now().Add(wait)
		t := time.AfterFunc(wait, func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.cond.Broadcast()
		})
		defer t.Stop()
		for len(g) < max && !q.closed && time.Now().Before(deadline) {
			q.cond.Wait()
			g, keys = q.fill(g, keys, max)
		}
	}
	return g, true
}

// fill adds to g, up to max, the deliveries waiting of the keys of g
// (keys), then those of the ready keys, oldest first, marking those busy.
func (q *keyQueue) fill(g []job, keys []string, max int) ([]job, []string) {
	for _, k := range keys {
		g = q.takeOf(g, k, max)
	}
	for len(g) < max && len(q.ready) > 0 {
		k := q.ready[0]
		q.ready[0] = ""
		q.ready = q.ready[1:]
		q.busy[k] = true
		keys = append(keys, k)
		g = q.takeOf(g, k, max)
	}
	return g, keys
}

// takeOf adds to g, up to max, the deliveries waiting of key k, a key g's
// taker has marked busy.
func (q *keyQueue) takeOf(g []job, k string, max int) []job {
	js := q.waiting[k]
	n := min(len(js), max-len(g))
	if n <= 0 {
		return g
	}
	g = append(g, js[:n]...)
	clear(js[:n])
	if n == len(js) {
		delete(q.waiting, k)
	} else {
		q.waiting[k] = js[n:]
	}
	q.handling += n
	return g
}

// done says n deliveries takeGroup returned for key were handled: the
// key's next one may go.
func (q *keyQueue) done(key string, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.busy, key)
	q.handling -= n
	q.held -= n
	if len(q.waiting[key]) > 0 {
		q.ready = append(q.ready, key)
	}
	q.cond.Broadcast()
}

// close makes put refuse deliveries and take return false once the queue is
// drained.
func (q *keyQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}
