package postgres

import "testing"

func TestSnapshotSees(t *testing.T) {
	s, err := parseSnapshot("100:110:102,105")
	if err != nil {
		t.Fatal(err)
	}
	for xid, want := range map[uint32]bool{5: true, 99: true, 100: true, 101: true, 102: false, 105: false, 109: true, 110: false, 500: false} {
		if got := s.sees(xid); got != want {
			t.Errorf("sees(%d) = %v, want %v", xid, got, want)
		}
	}
	// In the second epoch: xmax 2^32+10, a 32-bit xid of 4294967290 is
	// the first epoch's, before xmin.
	s, err = parseSnapshot("4294967300:4294967306:")
	if err != nil {
		t.Fatal(err)
	}
	if !s.sees(4294967290) || !s.sees(4) || s.sees(10) || s.sees(11) {
		t.Errorf("across the epoch: %v %v %v %v", s.sees(4294967290), s.sees(4), s.sees(10), s.sees(11))
	}
	if _, err := parseSnapshot("1:2"); err == nil {
		t.Error("a malformed snapshot parsed")
	}
}
