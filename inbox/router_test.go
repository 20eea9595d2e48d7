package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
)

// Three shapes of one event: v1 had a name, v2 split it, v3 added a
// currency with a default.
type (
	customerV1 struct {
		Name string `json:"name"`
	}
	customerV2 struct {
		First string `json:"first"`
		Last  string `json:"last"`
	}
	customer struct {
		First    string `json:"first"`
		Last     string `json:"last"`
		Currency string `json:"currency"`
	}
)

func (customerV1) MessageType() string { return "CustomerRegistered" }
func (customerV2) MessageType() string { return "CustomerRegistered" }
func (customer) MessageType() string   { return "CustomerRegistered" }
func (customerV2) MessageVersion() int { return 2 }
func (*customer) MessageVersion() int  { return 3 }

// dispatch runs r's handler on msg outside any transaction.
func dispatch(r *inbox.Router[any], msg courier.Message) error {
	return r.Handler()(context.Background(), nil, msg)
}

// newJSON is courier.NewJSON for a test's values.
func newJSON(t *testing.T, v any) courier.Message {
	t.Helper()
	m, err := courier.NewJSON("customers", "c1", v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Producers write the version from the Go type (a value or a pointer
// method), 1 without one; the router upcasts v1 and v2 to v3, so its one
// handler sees every message in the newest shape.
func TestRouterUpcastsToTheNewestShape(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{{customerV1{}, 1}, {customerV2{}, 2}, {customer{}, 3}, {&customer{}, 3}} {
		if got := newJSON(t, c.v).Version; got != c.want {
			t.Fatalf("NewJSON(%T) wrote version %d, want %d", c.v, got, c.want)
		}
	}
	r := inbox.NewRouter[any]()
	var seen []customer
	inbox.On(r, func(_ context.Context, _ any, msg courier.Message, v customer) error {
		if msg.Version != 3 {
			t.Errorf("the handler of version 3 got a message of version %d", msg.Version)
		}
		seen = append(seen, v)
		return nil
	})
	inbox.Upcast(r, func(v customerV1) (customerV2, error) {
		first, last, _ := strings.Cut(v.Name, " ")
		return customerV2{First: first, Last: last}, nil
	})
	inbox.Upcast(r, func(v customerV2) (customer, error) {
		return customer{First: v.First, Last: v.Last, Currency: "EUR"}, nil
	})
	for _, v := range []any{customerV1{Name: "Ada Lovelace"}, customerV2{First: "Alan", Last: "Turing"}, customer{First: "Grace", Last: "Hopper", Currency: "USD"}} {
		if err := dispatch(r, newJSON(t, v)); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
	}
	want := []customer{{"Ada", "Lovelace", "EUR"}, {"Alan", "Turing", "EUR"}, {"Grace", "Hopper", "USD"}}
	if len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Fatalf("the handler saw %+v, want %+v", seen, want)
	}
}

// A message newer than every version the router knows is ErrNewerVersion
// (naming its version and those known), not the default handler's nor
// malformed; one older than all it knows is malformed; a handler of the
// version itself wins over its upcaster; Handle takes the versions nothing
// else does.
func TestRouterVersions(t *testing.T) {
	r := inbox.NewRouter[any]()
	var got []string
	record := func(name string) inbox.Handler[any] {
		return func(_ context.Context, _ any, msg courier.Message) error {
			got = append(got, name)
			return nil
		}
	}
	r.HandleVersion("OrderPlaced", 2, record("v2"))
	r.HandleVersion("OrderPlaced", 3, record("v3"))
	r.UpcastFrom("OrderPlaced", 2, func(m courier.Message) (courier.Message, error) {
		t.Error("the upcaster ran for a version with a handler of its own")
		return m, nil
	})
	r.Handle("Refund", record("refund, any version"))
	r.Default(record("default"))
	msg := func(typ string, version int) courier.Message {
		return courier.NewMessage("orders", "o1", typ, nil, courier.WithVersion(version))
	}

	for _, m := range []courier.Message{msg("OrderPlaced", 2), msg("OrderPlaced", 3), msg("Refund", 7), msg("Unknown", 1)} {
		if err := dispatch(r, m); err != nil {
			t.Fatalf("%s v%d: %v", m.Type, m.Version, err)
		}
	}
	if strings.Join(got, "; ") != "v2; v3; refund, any version; default" {
		t.Fatalf("handled by %q", got)
	}
	err := dispatch(r, msg("OrderPlaced", 4))
	if !errors.Is(err, courier.ErrNewerVersion) || errors.Is(err, courier.ErrMalformed) ||
		!strings.Contains(err.Error(), "OrderPlaced version 4") || !strings.Contains(err.Error(), "[2 3]") {
		t.Fatalf("a newer version: %v; want ErrNewerVersion naming version 4 and the known [2 3]", err)
	}
	err = dispatch(r, msg("OrderPlaced", 1))
	if !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("an older version without a handler or an upcaster: %v; want ErrMalformed naming version 1", err)
	}
	bad := inbox.NewRouter[any]()
	bad.HandleVersion("X", 2, record("x"))
	bad.UpcastFrom("X", 1, func(m courier.Message) (courier.Message, error) { return m, nil })
	if err := dispatch(bad, msg("X", 1)); err == nil || errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), "later version") {
		t.Fatalf("an upcaster that returns the same version: %v; want an error saying it must return a later one", err)
	}
}

// Upcast refuses, at registration, an upcaster between two types or to an
// earlier version.
func TestUpcastRefusesWhatIsNotAnUpgrade(t *testing.T) {
	type other struct{}
	for name, register := range map[string]func(r *inbox.Router[any]){
		"another type": func(r *inbox.Router[any]) { inbox.Upcast(r, func(customerV1) (other, error) { return other{}, nil }) },
		"an earlier version": func(r *inbox.Router[any]) {
			inbox.Upcast(r, func(customer) (customerV2, error) { return customerV2{}, nil })
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if v := recover(); v == nil || !strings.Contains(v.(string), "an upcaster turns one version of a type into a later one") {
					t.Fatalf("panic %v", v)
				}
			}()
			register(inbox.NewRouter[any]())
		})
	}
}
