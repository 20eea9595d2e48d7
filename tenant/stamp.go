package tenant

import (
	"context"
	"strings"
	"time"

	"github.com/courier-go/courier/store"
)

// stamped is a tenant's relay store whose claimed messages carry the
// tenant's name in Header.
type stamped struct {
	store.RelayStore
	name string
}

// Claim claims from the tenant's database and stamps each message with
// the tenant's name.
func (s stamped) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	b, err := s.RelayStore.Claim(ctx, owner, limit, lease)
	for i := range b.Records {
		m := &b.Records[i].Message
		m.Headers = stamp(m.Headers, s.name)
	}
	return b, err
}

// The stamp is Header and its value. Header names are compared without
// regard to case, as HTTP, NATS and AMQP clients compare (or
// canonicalise) them: stamp and stampOf are the one place that sets and
// reads it, so that a header of another case, written into a row by
// hand, can neither stand beside the stamp nor be taken for it.

// stamp sets Header in h to name, deleting it first in every other case,
// and returns h (made when nil).
func stamp(h map[string]string, name string) map[string]string {
	if h == nil {
		h = make(map[string]string, 1)
	}
	for k := range h {
		if strings.EqualFold(k, Header) {
			delete(h, k)
		}
	}
	h[Header] = name
	return h
}

// stampOf returns the tenant's name h carries under Header, in any case:
// "" when it carries none; conflict is true when it carries several that
// differ, which name no tenant.
func stampOf(h map[string]string) (name string, conflict bool) {
	found := false
	for k, v := range h {
		if !strings.EqualFold(k, Header) {
			continue
		}
		if found && v != name {
			return "", true
		}
		name, found = v, true
	}
	return name, false
}
