package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/store/dburl"
)

// Serve the dashboard of many tenants, each with a SQLite file of its
// own: the tenant list at /courier/, tenant acme's pages under
// /courier/t/acme/. One token covers every tenant; at most four tenants'
// databases are open at once.
func ExampleNewTenants() {
	dir, _ := os.MkdirTemp("", "dashboard-tenants-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	urls := map[string]string{}
	for _, name := range []string{"acme", "globex"} {
		urls[name] = "sqlite://" + filepath.Join(dir, name+".db")
		db, err := dburl.Open(ctx, urls[name], dburl.Options{Create: true})
		if err != nil {
			fmt.Println(err)
			return
		}
		_, err = db.Migrate(ctx)
		db.Close()
		if err != nil {
			fmt.Println(err)
			return
		}
	}

	h, err := dashboard.NewTenants(dashboard.TenantsConfig{
		Config: dashboard.Config{Token: "a-long-random-secret", Prefix: "/courier"},
		// The tenants' names, read on each view: a file, a catalogue
		// query, or as here a fixed set.
		List: func(context.Context) ([]string, error) {
			names := make([]string, 0, len(urls))
			for name := range urls {
				names = append(names, name)
			}
			slices.Sort(names)
			return names, nil
		},
		// A tenant's database, opened when a page needs it.
		Open: func(ctx context.Context, name string) (dashboard.TenantDatabase, error) {
			db, err := dburl.Open(ctx, urls[name], dburl.Options{MaxConns: 4})
			if err != nil {
				return dashboard.TenantDatabase{}, err
			}
			return dashboard.TenantDatabase{Database: db, Sagas: db.Sagas(), Close: db.Close}, nil
		},
		MaxOpen: 4,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close() // once the server has stopped
	mux := http.NewServeMux()
	mux.Handle("/courier/", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, path := range []string{"/courier/", "/courier/t/globex/dead-letters", "/courier/t/initech/"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer a-long-random-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(path, resp.Status)
	}
	// Output:
	// /courier/ 200 OK
	// /courier/t/globex/dead-letters 200 OK
	// /courier/t/initech/ 404 Not Found
}
