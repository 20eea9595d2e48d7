package tenant

import (
	"context"
	"time"

	"github.com/courier-go/courier/store"
)

// stamped is a tenant's relay store whose claimed messages carry the
// tenant's name in Header.
type stamped struct {
	store.RelayStore
	name string
}

// Claim claims from the tenant's database and sets Header on each message.
func (s stamped) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	b, err := s.RelayStore.Claim(ctx, owner, limit, lease)
	for i := range b.Records {
		m := &b.Records[i].Message
		if m.Headers == nil {
			m.Headers = make(map[string]string, 1)
		}
		m.Headers[Header] = s.name
	}
	return b, err
}
