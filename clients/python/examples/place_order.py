"""Place an order and the message that announces it, in one transaction:
both are committed, or neither.

    courier migrate --database-url sqlite:///tmp/shop.db   # once: Courier's tables
    python3 place_order.py sqlite:///tmp/shop.db order-42 1999

The database URL is the one Courier's commands take: postgres://…
(psycopg 3), mysql://… (PyMySQL) or sqlite:///absolute/path.db (sqlite3).
Run `courier relay` on the same URL to publish the message.
"""

import sys
import urllib.parse

import courier_outbox as outbox


def connect(url):
    """A connection for url, and its driver's placeholder."""
    if url.startswith(("postgres://", "postgresql://")):
        import psycopg
        return psycopg.connect(url), "%s"
    if url.startswith("mysql://"):
        import pymysql
        u = urllib.parse.urlsplit(url)
        return pymysql.connect(host=u.hostname, port=u.port or 3306, user=urllib.parse.unquote(u.username or ""),
                               password=urllib.parse.unquote(u.password or ""), database=u.path.lstrip("/"),
                               charset="utf8mb4"), "%s"
    if url.startswith("sqlite:"):
        import sqlite3
        return sqlite3.connect(url[len("sqlite://"):] if url.startswith("sqlite://") else url[len("sqlite:"):]), "?"
    raise SystemExit("place_order: %s is no database URL: give postgres://…, mysql://… or sqlite:///path.db" % url)


def place_order(conn, mark, order_id, total):
    """Store the order and its OrderPlaced message; return the message."""
    msg = outbox.Message("orders", order_id, "OrderPlaced", {"order_id": order_id, "total": total},
                         headers={outbox.HEADER_CORRELATION_ID: "checkout-" + order_id})
    try:
        cur = conn.cursor()
        cur.execute("INSERT INTO orders (id, total) VALUES (%s, %s)".replace("%s", mark), (order_id, total))
        outbox.write(cur, msg)  # in the same transaction as the order
        conn.commit()
    except BaseException:
        conn.rollback()  # the order goes with the message: never one without the other
        raise
    return msg


def main(argv):
    if len(argv) != 4:
        raise SystemExit("usage: place_order.py DATABASE_URL ORDER_ID TOTAL")
    conn, mark = connect(argv[1])
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS orders (id VARCHAR(64) PRIMARY KEY, total INTEGER NOT NULL)")
        conn.commit()
        try:
            msg = place_order(conn, mark, argv[2], int(argv[3]))
        except outbox.ValidationError as e:
            # e names the field and the fix, as Courier's Go Writer does.
            raise SystemExit("place_order: %s" % e)
        print("placed %s: message %s on topic %s" % (argv[2], msg.id, msg.topic))
    finally:
        conn.close()


if __name__ == "__main__":
    main(sys.argv)
