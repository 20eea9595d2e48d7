package sqlstore

import (
	"bytes"
	"database/sql"
	"testing"

	"github.com/google/uuid"
)

// benchRow is a claimed row as database/sql hands it to Scan: bytes copied
// into a *[]byte, passed as the driver's to a Scanner.
type benchRow struct{}

var (
	benchHeaders        = []byte(`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	benchPayload        = []byte(`{"total":42}`)
	benchTime       any = int64(1764000000000000)
	benchHeadersSrc any = benchHeaders
)

func (benchRow) Scan(dest ...any) error {
	for i, d := range dest {
		switch d := d.(type) {
		case *int64:
			*d = int64(i)
		case *int:
			*d = i
		case *uuid.UUID:
			*d = uuid.UUID{1}
		case *string:
			*d = "orders"
		case *[]byte:
			if i == 9 {
				*d = bytes.Clone(benchHeaders)
			} else {
				*d = bytes.Clone(benchPayload)
			}
		case sql.Scanner:
			src := benchTime
			if i == 9 {
				src = benchHeadersSrc
			}
			if err := d.Scan(src); err != nil {
				return err
			}
		}
	}
	return nil
}

// BenchmarkScanRecord measures the scan of a claimed row on MySQL and
// SQLite, which a claim does for each of its rows.
func BenchmarkScanRecord(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		if _, err := ScanRecord(benchRow{}, micros); err != nil {
			b.Fatal(err)
		}
	}
}
