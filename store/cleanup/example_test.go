package cleanup_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/cleanup"
	"github.com/courier-go/courier/store/memstore"
)

// A cleanup pass on a store in memory: copies of published rows older than
// a week go, in batches of 1,000 rows.
func ExampleCleaner() {
	st := memstore.New(memstore.Config{KeepPublished: true})
	c := &cleanup.Cleaner{
		Ops:  st.Operations(), // a driver's Operations(): postgres.NewDriver(pool).Operations(), …
		Keep: map[store.Table]time.Duration{store.TablePublished: 7 * 24 * time.Hour, store.TableKeys: 0},
		Log:  slog.New(slog.DiscardHandler),
	}
	r, err := c.RunOnce(context.Background())
	fmt.Println(r.Deleted[store.TablePublished], r.Locked, err)
	// In a long-running process: go c.Run(ctx, 10*time.Minute)
	// Output: 0 false <nil>
}
