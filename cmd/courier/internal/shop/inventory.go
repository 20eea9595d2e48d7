package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
)

// InventoryConfig configures the inventory service.
type InventoryConfig struct {
	Config
	// Stock is each SKU's initial quantity, stored when the SKU is not in
	// the database yet (a restart keeps what is left). Orders of an unknown
	// SKU get StockUnavailable.
	Stock map[string]int
}

// InventoryService sets stock aside for orders and returns it:
//
//	ReserveStock → StockReserved, or StockUnavailable (not enough left, unknown SKU, or released first)
//	ReleaseStock → StockReleased, whether there was a reservation to return or not
//
// A reservation takes its quantity off the SKU's available stock in the same
// statement that checks there is enough, so concurrent orders never oversell.
type InventoryService struct {
	*base
	stock map[string]int
}

var _ Service = (*InventoryService)(nil)

// NewInventory returns the inventory service.
func NewInventory(cfg InventoryConfig) (*InventoryService, error) {
	b, err := newBase(Inventory, cfg.Config)
	if err != nil {
		return nil, err
	}
	for sku, q := range cfg.Stock {
		if q < 0 {
			return nil, fmt.Errorf("shop inventory: Stock[%q] is %d: use 0 or more", sku, q)
		}
	}
	s := &InventoryService{base: b, stock: cfg.Stock}
	b.spec = spec{tables: inventoryTables, topic: TopicInventory, setup: s.setup}
	return s, nil
}

func (s *InventoryService) setup(ctx context.Context, n *node, _ time.Duration) (incarnation, error) {
	if err := retry(ctx, func() error { return s.seed(ctx, n.db) }); err != nil {
		return incarnation{}, err
	}
	in := &inventoryNode{node: n}
	r := inbox.NewRouter[*sql.Tx]()
	inbox.On(r, in.reserve)
	inbox.On(r, in.release)
	return incarnation{handler: r.Handler()}, nil
}

// seed stores the initial stock of SKUs the database does not know yet.
// Instances that start at once may both insert a SKU: the second fails,
// and its retry finds the row.
func (s *InventoryService) seed(ctx context.Context, db *serviceDB) error {
	return db.InTx(ctx, func(tx *sql.Tx) error {
		for sku, q := range s.stock {
			known, err := exists(ctx, tx, db.q(`SELECT 1 FROM shop_stock WHERE sku = ?`), sku)
			if err != nil {
				return fmt.Errorf("seed stock: %w", err)
			}
			if known {
				continue
			}
			if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO shop_stock (sku, initial, available) VALUES (?, ?, ?)`), sku, q, q); err != nil {
				return fmt.Errorf("seed stock: %w", err)
			}
		}
		return nil
	})
}

type inventoryNode struct{ *node }

func (in *inventoryNode) reserve(ctx context.Context, tx *sql.Tx, msg courier.Message, c ReserveStock) error {
	var released sql.NullInt64
	err := tx.QueryRowContext(ctx, in.db.q(`SELECT released_at FROM shop_reservations WHERE order_id = ?`), c.OrderID).Scan(&released)
	switch {
	case err == nil && released.Valid:
		return in.reply(ctx, tx, msg, StockUnavailable{OrderID: c.OrderID}, "order was released before the reservation arrived")
	case err == nil: // reserved already: the same answer again
		return in.reply(ctx, tx, msg, StockReserved{OrderID: c.OrderID}, "")
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	if c.Qty < 1 {
		return in.reply(ctx, tx, msg, StockUnavailable{OrderID: c.OrderID}, "invalid quantity")
	}
	res, err := tx.ExecContext(ctx, in.db.q(`UPDATE shop_stock SET available = available - ? WHERE sku = ? AND available >= ?`), c.Qty, c.SKU, c.Qty)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		known, err := exists(ctx, tx, in.db.q(`SELECT 1 FROM shop_stock WHERE sku = ?`), c.SKU)
		if err != nil {
			return err
		}
		reason := "out of stock: " + c.SKU
		if !known {
			reason = "unknown SKU: " + c.SKU
		}
		return in.reply(ctx, tx, msg, StockUnavailable{OrderID: c.OrderID}, reason)
	}
	if _, err := tx.ExecContext(ctx, in.db.q(`INSERT INTO shop_reservations (order_id, sku, qty, created_at) VALUES (?, ?, ?, ?)`),
		c.OrderID, c.SKU, c.Qty, time.Now().UnixMicro()); err != nil {
		return err
	}
	return in.reply(ctx, tx, msg, StockReserved{OrderID: c.OrderID}, "")
}

// release compensates a reservation: it returns the order's stock once;
// with no reservation it records an empty, released one, so a reservation
// arriving late (after its step timed out) is refused.
func (in *inventoryNode) release(ctx context.Context, tx *sql.Tx, msg courier.Message, c ReleaseStock) error {
	var sku string
	var qty int
	var released sql.NullInt64
	now := time.Now().UnixMicro()
	err := tx.QueryRowContext(ctx, in.db.q(`SELECT sku, qty, released_at FROM shop_reservations WHERE order_id = ?`), c.OrderID).Scan(&sku, &qty, &released)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, in.db.q(`INSERT INTO shop_reservations (order_id, sku, qty, created_at, released_at) VALUES (?, '', 0, ?, ?)`),
			c.OrderID, now, now); err != nil {
			return err
		}
		return in.reply(ctx, tx, msg, StockReleased{OrderID: c.OrderID}, "")
	case err != nil:
		return err
	case released.Valid:
		return in.reply(ctx, tx, msg, StockReleased{OrderID: c.OrderID, Released: qty > 0}, "")
	}
	// Only the release that flips released_at returns the stock: two
	// releases at once both read the reservation unreleased, and the
	// second one's update then finds it released (and changes nothing).
	res, err := tx.ExecContext(ctx, in.db.q(`UPDATE shop_reservations SET released_at = ? WHERE order_id = ? AND released_at IS NULL`), now, c.OrderID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		if _, err := tx.ExecContext(ctx, in.db.q(`UPDATE shop_stock SET available = available + ? WHERE sku = ?`), qty, sku); err != nil {
			return err
		}
	}
	return in.reply(ctx, tx, msg, StockReleased{OrderID: c.OrderID, Released: true}, "")
}
