package cdc

import (
	"context"
	"fmt"
)

// Ready reports whether the relay does its part, for a readiness check
// (package health's Config.StatusChecks), and says which part: it reads the
// slot, or it waits as a standby while another relay reads it. It fails
// while the slot has no reader at all (the relay is starting, or
// reconnecting after an error: its logs say why) or cannot be looked at.
// Unless this relay reads the slot, it asks pg_replication_slots, one row
// of shared memory.
func (r *Relay) Ready(ctx context.Context) (string, error) {
	s := r.m.snapshot()
	if s.Making {
		return fmt.Sprintf("making slot %s: publishing the rows already in the table, then the log", r.cfg.Slot), nil
	}
	if s.Reading {
		if s.Confirmed == "" {
			return fmt.Sprintf("reading slot %s", r.cfg.Slot), nil
		}
		return fmt.Sprintf("reading slot %s, confirmed up to %s", r.cfg.Slot, s.Confirmed), nil
	}
	slot, err := r.db.Slot(ctx, r.cfg.Slot)
	switch {
	case err != nil:
		return "", fmt.Errorf("cannot look at slot %s: %w", r.cfg.Slot, err)
	case !slot.Exists:
		return "", fmt.Errorf("slot %s does not exist yet: the relay is starting (it makes the slot), or cannot; see its logs", r.cfg.Slot)
	case slot.Active && slot.PID != nil:
		return fmt.Sprintf("standby: another relay reads slot %s (walsender pid %d); this one takes over when it stops", r.cfg.Slot, *slot.PID), nil
	case slot.Active:
		return fmt.Sprintf("standby: another relay reads slot %s; this one takes over when it stops", r.cfg.Slot), nil
	}
	return "", fmt.Errorf("no relay reads slot %s: this one is starting, or reconnecting after an error (see its logs)", r.cfg.Slot)
}
