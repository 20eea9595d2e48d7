package inbox_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
)

// calls is an Observer that writes down what it is told.
type calls struct {
	name string
	log  *[]string
}

func (c calls) Handled(consumer string, msg courier.Message, res inbox.Result, err error, _ time.Duration) {
	*c.log = append(*c.log, c.name+" handled "+consumer+" "+msg.Topic+" "+res.String()+" "+errString(err))
}

func (c calls) Parked(consumer, reason string) {
	*c.log = append(*c.log, c.name+" parked "+consumer+" "+reason)
}

func (c calls) Replayed(consumer string, msg courier.Message) {
	*c.log = append(*c.log, c.name+" replayed "+consumer+" "+msg.Topic)
}

func (c calls) Grouped(consumer string, n int) {
	*c.log = append(*c.log, c.name+" grouped "+consumer+" "+strconv.Itoa(n))
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// Observers tells each observer of every call, in the order given, and
// leaves out the nil ones.
func TestObservers(t *testing.T) {
	var log []string
	o := inbox.Observers(calls{"a", &log}, nil, calls{"b", &log})
	msg := courier.Message{Topic: "orders"}
	o.Handled("billing", msg, inbox.Applied, nil, time.Millisecond)
	o.Handled("billing", msg, 0, errors.New("boom"), time.Millisecond)
	o.Parked("billing", "failed")
	o.Replayed("billing", msg)
	o.Grouped("billing", 3)
	want := []string{
		"a handled billing orders applied ok", "b handled billing orders applied ok",
		"a handled billing orders unknown boom", "b handled billing orders unknown boom",
		"a parked billing failed", "b parked billing failed",
		"a replayed billing orders", "b replayed billing orders",
		"a grouped billing 3", "b grouped billing 3",
	}
	if !slices.Equal(log, want) {
		t.Fatalf("told\n%q\nwant\n%q", log, want)
	}
	if _, ok := inbox.Observers().(inbox.NopObserver); !ok {
		t.Error("Observers() is not NopObserver{}")
	}
	if _, ok := inbox.Observers(nil, nil).(inbox.NopObserver); !ok {
		t.Error("Observers(nil, nil) is not NopObserver{}")
	}
	if o := inbox.Observers(nil, calls{"a", &log}); o != (calls{"a", &log}) {
		t.Errorf("Observers of one is %T, want that one", o)
	}
}
