package schema

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/courier-go/courier/store"
)

func TestLoadAndPending(t *testing.T) {
	ms := Load(fstest.MapFS{
		"migrations/0001_first.sql":  {Data: []byte("CREATE TABLE a (x int);")},
		"migrations/0002_second.sql": {Data: []byte("CREATE TABLE b (x int);")},
	})
	if len(ms) != 2 || ms[0].Version != 1 || ms[1].Name != "second" {
		t.Fatalf("Load = %+v", ms)
	}
	for current, want := range []int{2, 1, 0} {
		p, err := Pending(current, ms)
		if err != nil || len(p) != want {
			t.Errorf("Pending(%d) = %d migrations, %v; want %d", current, len(p), err, want)
		}
	}
	if _, err := Pending(3, ms); !errors.Is(err, store.ErrSchemaNewer) {
		t.Errorf("Pending(3) = %v, want ErrSchemaNewer", err)
	}
	if err := Check(0, errors.New("boom"), ms, "x.Migrate"); err == nil || err.Error() != "boom" {
		t.Errorf("Check with a read error = %v", err)
	}
	if err := Check(1, nil, ms, "x.Migrate"); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Errorf("Check(1) = %v, want ErrSchemaOutdated", err)
	}
	if err := Check(2, nil, ms, "x.Migrate"); err != nil {
		t.Errorf("Check(2) = %v", err)
	}
}

func TestSet(t *testing.T) {
	s := New(fstest.MapFS{"migrations/0001_first.sql": {Data: []byte("CREATE TABLE a (x int);")}},
		"CREATE TABLE v (version int);", "TestDB", "x.Migrate", "INSERT INTO v VALUES (%d, '%s');")
	if ms := s.Load(); len(ms) != 1 || ms[0].Name != "first" {
		t.Fatalf("Load = %+v", ms)
	}
	if err := s.Check(1, nil); err != nil {
		t.Errorf("Check(1) = %v", err)
	}
	if err := s.Check(0, nil); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Errorf("Check(0) = %v, want ErrSchemaOutdated", err)
	}
	ex := s.Export()
	if len(ex) != 1 || !strings.Contains(ex[0].SQL, "INSERT INTO v VALUES (1, 'first');") || !strings.Contains(ex[0].SQL, "CREATE TABLE a") {
		t.Errorf("Export = %+v", ex)
	}
}

func TestVersion(t *testing.T) {
	s := New(fstest.MapFS{}, "", "TestDB", "x.Migrate", "")
	absent := errors.New("no such table")
	isAbsent := func(err error) bool { return errors.Is(err, absent) }
	read := func(v int, err error) func(*int) error {
		return func(dest *int) error { *dest = v; return err }
	}
	if v, err := s.Version(read(4, nil), isAbsent); v != 4 || err != nil {
		t.Errorf("Version = %d, %v", v, err)
	}
	if v, err := s.Version(read(0, absent), isAbsent); v != 0 || err != nil {
		t.Errorf("Version of an absent table = %d, %v", v, err)
	}
	if _, err := s.Version(read(0, errors.New("boom")), isAbsent); err == nil || err.Error() != "x: read schema version: boom" {
		t.Errorf("Version of a failed read = %v", err)
	}
	if err := s.InsertError(errors.New("boom"), 2, true); !errors.Is(err, store.ErrSchemaOutdated) || !strings.HasPrefix(err.Error(), "x: insert 2 outbox messages: boom") {
		t.Errorf("InsertError = %v", err)
	}
	if s.InsertError(nil, 2, true) != nil {
		t.Error("InsertError(nil) is not nil")
	}
}
