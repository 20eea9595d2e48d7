package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
)

// courier demo --consumer-group 100 runs the shop's four consumers with
// grouped commits, under its load and faults (failing handlers,
// duplicated and reordered deliveries, a crash, a deploy), on SQLite files
// and on PostgreSQL: every invariant holds (nothing lost, nothing applied
// twice), and the consumers did apply groups: markers of several messages
// that one statement wrote, at one time.
func TestDemoCommandConsumerGroup(t *testing.T) {
	args := []string{"demo", "--orders", "60", "--keep", "--consumer-group", "100", "--consumer-group-wait", "20ms"}
	t.Run("sqlite", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "demo")
		runGroupedDemo(t, append(args, "--data-dir", dir), func(s string) string { return "sqlite://" + filepath.Join(dir, s+".db") })
	})
	t.Run("postgres", func(t *testing.T) {
		base := testenv.Need(t, testenv.EnvPostgres)
		// The demo's schema names are fixed, as in TestDemoLeavesOthersSchemas.
		admin, err := pgx.Connect(context.Background(), base)
		testenv.Must(t, err, "connect")
		t.Cleanup(func() {
			for _, s := range shop.Services {
				_, _ = admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS courier_demo_`+s+` CASCADE`)
			}
			admin.Close(context.Background())
		})
		runGroupedDemo(t, append(args, "--data-dir", t.TempDir(), "--database-url", base), func(s string) string {
			u, err := dburl.WithSchema(base, "courier_demo_"+s)
			testenv.Must(t, err, "schema URL")
			return u
		})
	})
}

// The demo runs on SQLite or PostgreSQL; courier shop's processes take
// --consumer-group on MySQL/MariaDB too (Kafka, kfake), and take an order
// to its end.
func TestShopCommandProcessesConsumerGroup(t *testing.T) {
	urls := map[string]string{}
	for _, s := range shop.Services {
		urls[s] = testenv.MySQL(t, nil).URL
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(shop.DefaultPartitions))
	testenv.Must(t, err, "kfake")
	t.Cleanup(c.Close)
	shopProcesses(t, "kafka://"+strings.Join(c.ListenAddrs(), ","), 1, func(s string) string { return urls[s] },
		"--consumer-group", "100", "--consumer-group-wait", "5ms")
}

// runGroupedDemo runs courier demo with args, checks that every invariant
// holds, and that each service's database at dbURL(service) holds a group:
// several inbox markers written at one time.
func runGroupedDemo(t *testing.T, args []string, dbURL func(service string) string) {
	t.Helper()
	code, out, errOut := runCLI(t, args...)
	if code != 0 || !strings.Contains(out, "All 8 invariants hold") {
		t.Fatalf("%s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
	}
	ctx := context.Background()
	grouped := 0
	for _, s := range shop.Services {
		db, err := dburl.Open(ctx, dbURL(s), dburl.Options{})
		testenv.Must(t, err, "open "+s)
		var largest int
		err = db.SQL().QueryRowContext(ctx, `SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM courier_inbox GROUP BY consumer, processed_at) AS g`).Scan(&largest)
		db.Close()
		testenv.Must(t, err, "count the markers of "+s+" by time")
		t.Logf("%s: largest group %d", s, largest)
		if largest > 1 {
			grouped++
		}
	}
	if grouped == 0 {
		t.Errorf("no service's consumer applied a group of messages in one transaction")
	}
}

// A bad grouping flag fails in one line naming it, before anything is
// written, in courier shop and courier demo alike.
func TestConsumerGroupFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ args, want string }{
		{"shop payment --consumer-group=-1", "--consumer-group is -1"},
		{"shop orders --consumer-group-wait=-1s", "--consumer-group-wait is -1s"},
		{"shop shipping --consumer-group-slow-run=-1s", "--consumer-group-slow-run is -1s"},
		{"demo --consumer-group=-5", "--consumer-group is -5"},
	} {
		args := append(strings.Fields(c.args), "--data-dir", filepath.Join(dir, "demo"))
		if strings.HasPrefix(c.args, "shop") {
			args = append(strings.Fields(c.args), "--database-url", "sqlite://"+filepath.Join(dir, "shop.db"))
		}
		code, _, errOut := runCLI(t, args...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want one line with %q", c.args, code, errOut, c.want)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the refused commands left %v behind", left)
	}
}
