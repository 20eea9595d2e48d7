"""Times the Python client's write path for the bench's producers section.

Usage: write.py SPEC, where SPEC is the JSON of bench/producers.go's
producerTarget. It writes SPEC["n"] transactions in a row, each inserting
one bench_orders row and one message with courier_outbox.write, and prints
{"seconds": …}: the loop's time, without the interpreter's start.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

import courier_outbox  # noqa: E402

PAYLOAD = b'{"order":"order-0000000","customer":"customer-42","total":12345,"currency":"EUR","lines":3}'


def connect(spec):
    """Returns (connection, the business insert, a function that runs one transaction)."""
    dialect = spec["dialect"]
    if dialect == "postgres":
        import psycopg

        conn = psycopg.connect(spec["url"])
        conn.execute("SELECT set_config('search_path', %s, false)", (spec["schema"],))
        conn.commit()
        return conn, "INSERT INTO bench_orders (id, total) VALUES (%s, %s)"
    if dialect == "mysql":
        import pymysql

        conn = pymysql.connect(host=spec["host"], port=spec["port"], user=spec["user"],
                               password=spec.get("password") or "", database=spec["database"], autocommit=False)
        return conn, "INSERT INTO bench_orders (id, total) VALUES (%s, %s)"
    if dialect == "sqlite":
        import sqlite3

        conn = sqlite3.connect(spec["path"], timeout=30)
        return conn, "INSERT INTO bench_orders (id, total) VALUES (?, ?)"
    raise SystemExit(f"unknown dialect {dialect!r}")


def main():
    spec = json.loads(sys.argv[1])
    conn, insert = connect(spec)
    start = time.perf_counter()
    for i in range(spec["n"]):
        cur = conn.cursor()
        cur.execute(insert, (f"o-{i}", i))
        msg = courier_outbox.Message("orders", f"order-{i % 1000}", "OrderPlaced", PAYLOAD,
                                     content_type="application/json")
        courier_outbox.write(cur, msg)
        conn.commit()
    took = time.perf_counter() - start
    conn.close()
    print(json.dumps({"seconds": took}))


if __name__ == "__main__":
    main()
