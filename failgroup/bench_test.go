package failgroup_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
)

// BenchmarkCollect groups 10,000 relay-side dead letters of 10 causes,
// their errors apart in ids and sizes: what a view of the dashboard's
// failures page and courier dlq groups cost at the default bound.
func BenchmarkCollect(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres", "mysql"} {
		b.Run(name, func(b *testing.B) {
			url := databases[name](b)
			ctx := context.Background()
			db, err := dburl.Open(ctx, url, dburl.Options{Create: true})
			testenv.Must(b, err, "open")
			b.Cleanup(db.Close)
			_, err = db.Migrate(ctx)
			testenv.Must(b, err, "migrate")
			const n = 10_000
			for done := 0; done < n; done += 1000 {
				topics, errs := make([]string, 1000), make([]string, 1000)
				for i := range topics {
					topics[i] = fmt.Sprintf("topic-%d", (done+i)%7)
					errs[i] = fmt.Sprintf(`subject "courier.%s": cause %c: message %d is %d bytes`, topics[i], 'a'+(done+i)%10, done+i, 1000+i)
				}
				deadLetters(b, db, topics, errs)
			}
			b.ResetTimer()
			for b.Loop() {
				rep, err := failgroup.Collect(ctx, db.Admin(), failgroup.Options{})
				if err != nil || rep.Read != n || len(rep.Groups) != 10 {
					b.Fatalf("collect: read %d in %d groups, %v", rep.Read, len(rep.Groups), err)
				}
			}
		})
	}
}
