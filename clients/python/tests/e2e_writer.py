"""Carry out a plan of test/polyglot (its format is in that package's
documentation): read it as JSON on stdin, run its transactions with
courier_outbox, print each message written as a line of JSON."""

import base64
import datetime
import json
import sys
import urllib.parse

import courier_outbox as outbox


def connect(dialect, database):
    """A connection to the plan's database and its placeholder."""
    if dialect == "postgres":
        import psycopg
        conn = psycopg.connect(database["url"])
        conn.execute("SELECT set_config('search_path', %s, false)", (database["schema"],))
        conn.commit()
        return conn, "%s"
    if dialect == "mysql":
        import pymysql
        u = urllib.parse.urlsplit(database["url"])
        conn = pymysql.connect(host=u.hostname, port=u.port or 3306, user=urllib.parse.unquote(u.username or ""),
                               password=urllib.parse.unquote(u.password or ""), database=u.path.lstrip("/"),
                               charset="utf8mb4", autocommit=False)
        return conn, "%s"
    if dialect == "sqlite":
        import sqlite3
        return sqlite3.connect(database["path"], timeout=30), "?"
    raise SystemExit("unknown dialect %r" % dialect)


def message(m):
    """The Message a plan's message describes."""
    kinds = [k for k in ("payload_base64", "payload_text", "payload_json") if k in m]
    if len(kinds) != 1:
        raise SystemExit("message %r: give exactly one of payload_base64, payload_text, payload_json" % m)
    if "payload_base64" in m:
        payload = base64.b64decode(m["payload_base64"])
    elif "payload_text" in m:
        payload = m["payload_text"]
    else:
        payload = m["payload_json"]
    kw = {}
    for field in ("id", "version", "content_type", "headers"):
        if field in m:
            kw[field] = m[field]
    if "occurred_at" in m:
        kw["occurred_at"] = datetime.datetime.fromisoformat(m["occurred_at"].replace("Z", "+00:00"))
    return outbox.Message(m["topic"], m["key"], m["type"], payload, **kw)


def due(d):
    if "after_ms" in d:
        return datetime.timedelta(milliseconds=d["after_ms"])
    return datetime.datetime.fromisoformat(d["at"].replace("Z", "+00:00"))


def described(m):
    out = {"id": str(m.id), "topic": m.topic, "key": m.key, "type": m.type, "version": m.version,
           "content_type": m.content_type, "payload_base64": base64.b64encode(m.payload).decode(),
           "occurred_at": m.occurred_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
    if m.headers:
        out["headers"] = m.headers
    return out


def main():
    plan = json.load(sys.stdin)
    conn, mark = connect(plan["dialect"], plan["database"])
    try:
        for n, tx in enumerate(plan["transactions"]):
            msgs = [message(m) for m in tx["messages"]]
            cur = conn.cursor()
            cur.execute("INSERT INTO polyglot_orders (id, note) VALUES (%s, %s)".replace("%s", mark),
                        (tx["order"]["id"], tx["order"]["note"]))
            if "due" in tx:
                outbox.schedule(cur, due(tx["due"]), *msgs)
            else:
                outbox.write(cur, *msgs)
            cur.close()
            if tx["commit"]:
                conn.commit()
            else:
                conn.rollback()
            for m in msgs:
                print(json.dumps({"tx": n, "committed": tx["commit"], "message": described(m)}), flush=True)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
