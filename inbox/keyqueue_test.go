package inbox

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
)

func keyed(key string, n int) job {
	return job{msg: courier.Message{Key: key, Payload: []byte(fmt.Sprint(n))}}
}

// Workers taking from a keyQueue never hold two deliveries of one key at
// once and get each key's in the order put; put waits while the queue is
// full; close lets the workers drain what is left.
func TestKeyQueue(t *testing.T) {
	q := newKeyQueue(16)
	const keys, perKey, workers = 7, 200, 4
	var mu sync.Mutex
	busy := map[string]bool{}
	got := map[string][]string{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j, ok := q.take(); ok; j, ok = q.take() {
				k := j.msg.Key
				mu.Lock()
				if busy[k] {
					t.Errorf("two deliveries of key %s handled at once", k)
				}
				busy[k] = true
				got[k] = append(got[k], string(j.msg.Payload))
				mu.Unlock()
				time.Sleep(time.Microsecond)
				mu.Lock()
				busy[k] = false
				mu.Unlock()
				q.done(k, 1)
			}
		})
	}
	for i := range perKey {
		for k := range keys {
			if !q.put(keyed(fmt.Sprint("k", k), i)) {
				t.Fatal("put refused before close")
			}
		}
	}
	q.close()
	wg.Wait()
	if q.put(keyed("late", 0)) {
		t.Fatal("put accepted after close")
	}
	for k := range keys {
		key := fmt.Sprint("k", k)
		if len(got[key]) != perKey {
			t.Fatalf("key %s: %d of %d handled", key, len(got[key]), perKey)
		}
		for i, p := range got[key] {
			if p != fmt.Sprint(i) {
				t.Fatalf("key %s: handled out of order: %v", key, got[key])
			}
		}
	}
}

// A full queue makes put wait until a delivery is done, and close wakes a
// waiting put.
func TestKeyQueueFull(t *testing.T) {
	q := newKeyQueue(2)
	q.put(keyed("a", 0))
	q.put(keyed("a", 1))
	put := make(chan bool)
	go func() { put <- q.put(keyed("b", 0)) }()
	select {
	case <-put:
		t.Fatal("put went in while the queue was full")
	case <-time.After(50 * time.Millisecond):
	}
	j, _ := q.take()
	q.done(j.msg.Key, 1)
	if !<-put {
		t.Fatal("put refused once there was room")
	}
	go func() { put <- q.put(keyed("c", 0)) }()
	q.close()
	if <-put {
		t.Fatal("put accepted after close")
	}
}
