package dburl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// Open turns a URL into a Driver; everything else is asked of the Driver,
// whatever the dialect.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "dburl-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	db, err := dburl.Open(ctx, "sqlite://"+filepath.Join(dir, "app.db"), dburl.Options{Create: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if _, err := db.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.RelayStore(ctx, store.RelayConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(db.Dialect(), "polled every", db.PollInterval())
	// Output: sqlite polled every 100ms
}
