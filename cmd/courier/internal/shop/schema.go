package shop

import "strings"

// The services' own tables, written once for every dialect: {id} is a key
// column, {str} a short text, {int} a 64-bit integer. Times are Unix
// microseconds, the same on every dialect.
var (
	ordersTables = []string{`CREATE TABLE IF NOT EXISTS shop_orders (
    id          {id} PRIMARY KEY,
    customer    {str} NOT NULL,
    sku         {str} NOT NULL,
    qty         {int} NOT NULL,
    amount      {int} NOT NULL,
    status      {str} NOT NULL,
    reason      {str} NOT NULL DEFAULT '',
    created_at  {int} NOT NULL,
    finished_at {int}
)`}

	paymentTables = []string{
		// One row per order: the unique constraint backs the inbox up, and
		// makes a charge and a refund that finds no charge (status void: a
		// late charge is refused) exclude each other, even when they run
		// at the same time.
		`CREATE TABLE IF NOT EXISTS shop_charges (
    id         {id} PRIMARY KEY,
    order_id   {id} NOT NULL UNIQUE,
    customer   {str} NOT NULL,
    amount     {int} NOT NULL,
    status     {str} NOT NULL,
    created_at {int} NOT NULL
)`,
		`CREATE TABLE IF NOT EXISTS shop_refunds (
    order_id   {id} PRIMARY KEY,
    charge_id  {id} NOT NULL UNIQUE,
    amount     {int} NOT NULL,
    created_at {int} NOT NULL
)`,
	}

	inventoryTables = []string{
		`CREATE TABLE IF NOT EXISTS shop_stock (
    sku       {id} PRIMARY KEY,
    initial   {int} NOT NULL,
    available {int} NOT NULL
)`,
		// released_at is set when the reservation is returned. A release that
		// finds no reservation leaves a row with qty 0, already released, so a
		// late ReserveStock is refused.
		`CREATE TABLE IF NOT EXISTS shop_reservations (
    order_id    {id} PRIMARY KEY,
    sku         {str} NOT NULL,
    qty         {int} NOT NULL,
    created_at  {int} NOT NULL,
    released_at {int}
)`,
	}

	shippingTables = []string{
		// status: prepared, cancelled, or void (cancelled before it was
		// prepared: a late PrepareShipment is refused).
		`CREATE TABLE IF NOT EXISTS shop_shipments (
    order_id   {id} PRIMARY KEY,
    id         {id} NOT NULL,
    customer   {str} NOT NULL,
    sku        {str} NOT NULL,
    qty        {int} NOT NULL,
    status     {str} NOT NULL,
    created_at {int} NOT NULL,
    updated_at {int} NOT NULL
)`,
	}
)

// ddl writes a table of the lists above in the types of dialect (a
// store.Database's Dialect()).
func ddl(dialect, table string) string {
	types := map[string][]string{
		"sqlite":   {"{id}", "TEXT", "{str}", "TEXT", "{int}", "INTEGER"},
		"postgres": {"{id}", "text", "{str}", "text", "{int}", "bigint"},
		"mysql":    {"{id}", "VARCHAR(191)", "{str}", "VARCHAR(255)", "{int}", "BIGINT"},
	}
	return strings.NewReplacer(types[dialect]...).Replace(table)
}
