package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/store/dburl"
)

// Mount the dashboard under /courier/ in a program's own server, with a
// token, since the server is not on a loopback address only.
func Example() {
	dir, _ := os.MkdirTemp("", "dashboard-example-")
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

	h, err := dashboard.New(dashboard.Config{
		Database: db,
		Sagas:    db.Sagas(),
		Token:    "a-long-random-secret",
		Prefix:   "/courier",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/courier/", h)

	// Read the status every Config.SampleEvery for the overview's trend
	// charts, until the program stops.
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan error)
	go func() { sampled <- h.Run(sampling) }()
	defer func() { stopSampling(); <-sampled }()

	// A script reads a page with the token; a browser logs in with it.
	srv := httptest.NewServer(mux)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/courier/dead-letters", nil)
	req.Header.Set("Authorization", "Bearer a-long-random-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)

	// Listening anywhere but on loopback needs the token.
	fmt.Println(dashboard.CheckBind("0.0.0.0:8080", "", "Token") != nil)
	// Output:
	// 200 OK
	// true
}
