package cdc

import "testing"

// Failover slots come with PostgreSQL 17; the version is read however the
// server spells it.
func TestFailoverSlots(t *testing.T) {
	for v, want := range map[string]bool{
		"17.10": true, "18.4": true, "17devel": true, "100.1": true,
		"16.8": false, "15.19 (Debian 15.19-0+deb12u1)": false, "9.6.24": false, "": false, "devel": false,
	} {
		if got := failoverSlots(v); got != want {
			t.Errorf("failoverSlots(%q) = %v, want %v", v, got, want)
		}
	}
}
