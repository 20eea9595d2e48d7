package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
)

// schema holds the ledger's own tables, next to Courier's: how many
// postings the writer numbered per account, and the balances the
// consumer keeps, with the number of the last posting applied.
const schema = `
CREATE TABLE IF NOT EXISTS ledger_accounts (
	account TEXT PRIMARY KEY,
	written BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger_balances (
	account TEXT PRIMARY KEY,
	applied BIGINT NOT NULL,
	balance BIGINT NOT NULL
);`

// Posted is a posting to an account, on topic "postings", keyed by the
// account: Seq numbers an account's postings from 1, in the order they
// were written.
type Posted struct {
	Account string `json:"account"`
	Seq     int64  `json:"seq"`
	Amount  int64  `json:"amount"`
}

// apply adds a posting to its account's balance, in the inbox's
// transaction (the inbox records the message applied in it, so a
// redelivery is skipped). A posting must follow the account's last one
// applied: one that does not fails, and would be retried and in the end
// parked, which an account's postings applied in order never do.
func apply(ctx context.Context, tx pgx.Tx, _ courier.Message, p Posted) error {
	var applied int64
	err := tx.QueryRow(ctx, `INSERT INTO ledger_balances (account, applied, balance) VALUES ($1, 0, 0)
ON CONFLICT (account) DO UPDATE SET account = EXCLUDED.account RETURNING applied`, p.Account).Scan(&applied)
	if err != nil {
		return err
	}
	if p.Seq != applied+1 {
		return fmt.Errorf("account %s: posting %d arrived after posting %d: out of order", p.Account, p.Seq, applied)
	}
	_, err = tx.Exec(ctx, `UPDATE ledger_balances SET applied = $2, balance = balance + $3 WHERE account = $1`, p.Account, p.Seq, p.Amount)
	return err
}
