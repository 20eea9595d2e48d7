package inbox

import "sync"

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
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !(q.closed && q.handling == 0) {
		q.cond.Wait()
	}
	if len(q.ready) == 0 {
		return job{}, false
	}
	k := q.ready[0]
	q.ready[0] = ""
	q.ready = q.ready[1:]
	js := q.waiting[k]
	j := js[0]
	js[0] = job{}
	if len(js) == 1 {
		delete(q.waiting, k)
	} else {
		q.waiting[k] = js[1:]
	}
	q.busy[k] = true
	q.handling++
	return j, true
}

// done says the delivery take returned for key was handled: the key's next
// one may go.
func (q *keyQueue) done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.busy, key)
	q.handling--
	q.held--
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
