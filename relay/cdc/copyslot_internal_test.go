package cdc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/postgres"
)

// A session that makes the slot waits for its temporary slot to confirm
// its position before copying it; when the temporary slot is gone (its
// walsender ended, as a server just promoted ends one that connected while
// it was a standby), the wait ends with errSlotGone, so that the session
// starts again, instead of waiting for a slot that no longer exists.
func TestCopySlotEndsWhenTheTemporarySlotIsGone(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	r, err := New(postgres.NewDriver(pg.Pool).CDC(), memory.NewPublisher(), Config{Slot: "courier_absent", Publication: "courier_absent"})
	testenv.Must(t, err, "relay")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.copySlot(ctx, temporarySlot("courier_absent"), 1)
	if !errors.Is(err, errSlotGone) {
		t.Fatalf("copySlot of a temporary slot that does not exist: %v; want errSlotGone", err)
	}
}
