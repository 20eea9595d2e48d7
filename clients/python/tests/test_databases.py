"""courier_outbox on real databases: the rows it writes, in the caller's
transaction, are the rows Go's inserters write; a rollback leaves nothing;
an invalid message writes nothing. The databases, migrated by Courier, are
named by environment variables (the Go test clients/python/client_test.go
sets them); a dialect whose variable is unset is skipped:

    COURIER_PY_POSTGRES_URL, COURIER_PY_POSTGRES_SCHEMA   psycopg 3
    COURIER_PY_MYSQL_URL (mysql://user[:password]@host:port/db)   PyMySQL
    COURIER_PY_SQLITE_PATH   sqlite3
"""

import datetime
import hashlib
import json
import os
import select
import time
import unittest
import urllib.parse
import uuid

import courier_outbox as outbox
from courier_outbox import columns

from . import vectors

UTC = datetime.timezone.utc
COLUMNS = ", ".join(columns.NAMES)


def _now():
    return datetime.datetime.now(UTC)


class Dialect:
    """The tests every dialect runs; a subclass connects and reads rows."""

    mark = "%s"

    def setUp(self):
        self.conn = self.connect()
        self.addCleanup(self.conn.close)
        self.topic = "t" + uuid.uuid4().hex[:12]

    def message(self, key="order-42", **kw):
        kw.setdefault("payload", {"order_id": key})
        return outbox.Message(kw.pop("topic", self.topic), key, kw.pop("type", "OrderPlaced"), **kw)

    def query(self, q, args=()):
        cur = self.conn.cursor()
        try:
            cur.execute(q.replace("%s", self.mark), args)
            return cur.fetchall()
        finally:
            cur.close()

    def rows(self, table="courier_outbox", extra=""):
        """The rows of this test's topic in table, in id order, decoded."""
        rows = self.query("SELECT %s, created_at%s FROM %s WHERE topic = %%s ORDER BY id" % (COLUMNS, extra, table),
                          (self.topic,))
        self.conn.commit()
        return [self.decode(r) for r in rows]

    def decode(self, r):
        """A row as (message, created_at, *extra times), normalised."""
        id, topic, key, typ, version, ct, payload, headers, occurred, *times = r
        if isinstance(headers, (bytes, str)):
            headers = json.loads(headers)
        m = outbox.Message(topic, key, typ, bytes(payload), headers=headers, id=str(id), version=version,
                           content_type=ct, occurred_at=self.time(occurred))
        return (m, *[self.time(t) for t in times])

    def assertWritten(self, got, want):
        """got, a row's message, is want as Go's inserter stores it."""
        for field in ("id", "topic", "key", "type", "version", "content_type", "payload", "headers", "occurred_at"):
            self.assertEqual(getattr(got, field), getattr(want, field), field)

    def assertNow(self, t, slack=datetime.timedelta(seconds=30)):
        self.assertLess(abs(t - _now()), slack, "%s is not the time of writing" % t)

    def test_write_commits_the_rows(self):
        msgs = [self.message(), self.message(payload=b"\x00\xff", headers={"x-a": "1", "traceparent": "t"}),
                self.message(key="заказ-ß", payload="naïve ✓", version=3, content_type="text/plain",
                             headers={"x-note": "<&> \"q\" \\ \t ü"},
                             occurred_at=datetime.datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC))]
        outbox.write(self.conn, *msgs)
        self.conn.commit()
        rows = self.rows()
        self.assertEqual(len(rows), 3)
        for (got, created), want in zip(rows, msgs):
            self.assertWritten(got, want)
            self.assertNow(created)

    def test_write_with_a_cursor(self):
        cur = self.conn.cursor()
        outbox.write(cur, self.message())
        cur.close()
        self.conn.commit()
        self.assertEqual(len(self.rows()), 1)

    def test_rollback_leaves_nothing(self):
        outbox.write(self.conn, self.message(), self.message(key="b"))
        outbox.schedule(self.conn, datetime.timedelta(hours=1), self.message())
        self.conn.rollback()
        self.assertEqual(self.rows(), [])
        self.assertEqual(self.rows("courier_outbox_scheduled"), [])

    def test_invalid_writes_nothing(self):
        ok, bad = self.message(), self.message(headers={"Content-Type": "x"})
        with self.assertRaises(outbox.ValidationError) as raised:
            outbox.write(self.conn, ok, bad)
        self.assertEqual(str(raised.exception),
                         'outbox: message 2 of 2: courier: message.Headers["Content-Type"] is a name HTTP acts on '
                         "(credentials, routing, framing or a webhook signature): choose another name; sent as a "
                         "webhook's request header it would change how the request is authenticated, routed or read")
        self.conn.commit()  # the transaction is intact: nothing ran
        self.assertEqual(self.rows(), [])

    def test_defaults(self):
        before = _now()
        m = self.message(payload={"total": 1999, "note": "ü"})
        outbox.write(self.conn, m)
        self.conn.commit()
        (got, _), = self.rows()
        self.assertEqual(got.id.version, 7)
        self.assertEqual(got.content_type, "application/json")
        self.assertEqual(json.loads(got.payload), {"total": 1999, "note": "ü"})
        self.assertEqual(got.version, 1)
        self.assertIsNone(got.headers)
        self.assertLessEqual(before - datetime.timedelta(microseconds=1), got.occurred_at)

    def test_schedule_at(self):
        at = datetime.datetime(2031, 5, 6, 7, 8, 9, 654321, tzinfo=UTC)
        msgs = [self.message(), self.message(key="b", headers={"x-a": "b"})]
        outbox.schedule(self.conn, at.astimezone(datetime.timezone(datetime.timedelta(hours=5))), *msgs)
        self.conn.commit()
        rows = self.rows("courier_outbox_scheduled", ", due_at")
        self.assertEqual(len(rows), 2)
        for (got, created, due), want in zip(rows, msgs):
            self.assertWritten(got, want)
            self.assertEqual(due, at)
            self.assertNow(created)
        self.assertEqual(self.rows(), [])

    def test_schedule_after(self):
        outbox.schedule(self.conn, datetime.timedelta(hours=2), self.message())
        self.conn.commit()
        (_, created, due), = self.rows("courier_outbox_scheduled", ", due_at")
        self.assertLess(abs(due - created - datetime.timedelta(hours=2)), datetime.timedelta(seconds=1))

    def test_schedule_refuses_a_due_time_of_no_use(self):
        for due in (datetime.timedelta(0), datetime.timedelta(seconds=-1), datetime.datetime(2030, 1, 1), None):
            with self.subTest(due=due), self.assertRaises(ValueError) as raised:
                outbox.schedule(self.conn, due, self.message())
            self.assertNotIsInstance(raised.exception, outbox.ValidationError)

    def test_autocommit_is_refused(self):
        if not self.autocommit(self.conn):
            self.skipTest("the driver does not say whether a transaction is open")
        with self.assertRaises(TypeError) as raised:
            outbox.write(self.conn, self.message())
        self.assertIn("autocommit", str(raised.exception))
        self.begin(self.conn)  # in an explicit transaction, the write is part of it
        outbox.write(self.conn, self.message())
        self.conn.rollback()
        self.assertEqual(self.rows(), [])

    def test_many_messages_in_one_call(self):
        # More than a statement holds on every dialect (500 on MySQL, 1,000
        # on SQLite), and more than 1 MiB of payloads (MySQL's bound).
        msgs = [self.message(key="k%d" % (i % 7), payload=b"p" * (i % 3) * 1000 + str(i).encode())
                for i in range(1201)]
        outbox.write(self.conn, *msgs)
        self.conn.commit()
        rows = self.rows()
        self.assertEqual([r[0].id for r in rows], [m.id for m in msgs])
        self.assertEqual([r[0].payload for r in rows], [m.payload for m in msgs])

    headers_sql = "headers"

    def test_rows_are_the_vectors(self):
        # rows.json: the row each dialect's Go inserters store for each
        # valid vector, written and scheduled. Read back in the writing
        # transaction, then rolled back, so the vectors' ids stay free.
        contract = vectors.load("rows.json")
        dialect = self.rows_dialect()
        valid = {c["name"]: vectors.message(c["message"]) for c in vectors.load("messages.json")["valid"]}
        want = contract["dialects"][dialect]
        outbox.write(self.conn, *[valid[r["name"]] for r in want["outbox"]])
        outbox.schedule(self.conn, vectors.when(contract["due_at"]), *[valid[r["name"]] for r in want["scheduled"]])
        for table, extra in (("outbox", ""), ("scheduled", ", due_at")):
            self.assertTrue(want[table])
            for r in want[table]:
                with self.subTest(table=table, vector=r["name"]):
                    got = self.query("SELECT message_id, topic, ordering_key, type, version, content_type, payload, "
                                     "%s, occurred_at%s FROM %s WHERE message_id = %%s"
                                     % (self.headers_sql, extra, "courier_outbox" + ("_" + table if extra else "")),
                                     (r["row"]["message_id"],))
                    self.assertEqual(len(got), 1)
                    self.assertEqual(self.vector_row(got[0]), r["row"])
        self.conn.rollback()

    def rows_dialect(self):
        return type(self).__name__.lower()

    def vector_row(self, values):
        """A row as rows.json holds it."""
        names = ["message_id", "topic", "ordering_key", "type", "version", "content_type", "payload", "headers",
                 "occurred_at", "due_at"]
        row = dict(zip(names, values))
        row["message_id"] = str(row["message_id"])
        payload = bytes(row["payload"])
        row["payload"] = {"length": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
        for t in ("occurred_at", "due_at"):
            if t in row:
                row[t] = self.vector_time(row[t])
        return row

    @classmethod
    def vector_time(cls, v):
        return cls.time(v).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def test_valid_vectors(self):
        contract = vectors.load("messages.json")
        for case in contract["valid"]:
            with self.subTest(case["name"]):
                m = vectors.message(case["message"])
                m.topic = self.topic
                m.id = uuid.uuid4()
                outbox.write(self.conn, m)
                self.conn.commit()
                got = self.query("SELECT %s FROM courier_outbox WHERE message_id = %%s" % COLUMNS, (str(m.id),))
                self.conn.commit()
                self.assertEqual(len(got), 1)
                self.assertWritten(self.decode(got[0])[0], m)


@unittest.skipUnless(os.environ.get("COURIER_PY_SQLITE_PATH"), "COURIER_PY_SQLITE_PATH is not set")
class SQLite(Dialect, unittest.TestCase):
    mark = "?"

    def connect(self):
        import sqlite3
        return sqlite3.connect(os.environ["COURIER_PY_SQLITE_PATH"], timeout=30)

    @staticmethod
    def time(v):
        return datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(microseconds=v)

    @staticmethod
    def autocommit(conn):
        conn.isolation_level = None
        return True

    @staticmethod
    def vector_time(v):
        return v

    @staticmethod
    def begin(conn):
        conn.execute("BEGIN")

    def test_headers_are_gos_json_text(self):
        outbox.write(self.conn, self.message(headers={"x-b": "<&>\u2028", "x-a": "ü\t\x01\x7f"}))
        self.conn.commit()
        (text,), = self.query("SELECT headers FROM courier_outbox WHERE topic = ?", (self.topic,))
        # What Go's json.Marshal gives the map: keys sorted, HTML escaped.
        self.assertEqual(text, '{"x-a":"ü\\t\\u0001\x7f","x-b":"\\u003c\\u0026\\u003e\\u2028"}')


@unittest.skipUnless(os.environ.get("COURIER_PY_MYSQL_URL"), "COURIER_PY_MYSQL_URL is not set")
class MySQL(Dialect, unittest.TestCase):

    def connect(self):
        import pymysql
        u = urllib.parse.urlsplit(os.environ["COURIER_PY_MYSQL_URL"])
        return pymysql.connect(host=u.hostname, port=u.port or 3306, user=urllib.parse.unquote(u.username or ""),
                               password=urllib.parse.unquote(u.password or ""), database=u.path.lstrip("/"),
                               charset="utf8mb4", autocommit=False)

    @staticmethod
    def time(v):
        return v.replace(tzinfo=UTC)

    @staticmethod
    def autocommit(conn):
        conn.autocommit(True)
        return hasattr(conn, "server_status")

    def rows_dialect(self):
        (version,), = self.query("SELECT VERSION()")
        if "mariadb" not in str(version).lower():
            self.skipTest("rows.json holds MariaDB's rows; this is MySQL %s, whose JSON type rewrites headers" % version)
        return "mariadb"

    @staticmethod
    def begin(conn):
        conn.begin()


def _mysqldb():
    try:
        import MySQLdb
        return MySQLdb
    except ImportError:
        return None


@unittest.skipUnless(os.environ.get("COURIER_PY_MYSQL_URL"), "COURIER_PY_MYSQL_URL is not set")
@unittest.skipUnless(_mysqldb(), "MySQLdb (mysqlclient) is not installed")
class MySQLdb(MySQL):
    def connect(self):
        u = urllib.parse.urlsplit(os.environ["COURIER_PY_MYSQL_URL"])
        return _mysqldb().connect(host=u.hostname, port=u.port or 3306, user=urllib.parse.unquote(u.username or ""),
                                  password=urllib.parse.unquote(u.password or ""), database=u.path.lstrip("/"),
                                  charset="utf8mb4")


@unittest.skipUnless(os.environ.get("COURIER_PY_POSTGRES_URL"), "COURIER_PY_POSTGRES_URL is not set")
class Postgres(Dialect, unittest.TestCase):
    headers_sql = "headers::text"

    def connect(self):
        import psycopg
        conn = psycopg.connect(os.environ["COURIER_PY_POSTGRES_URL"])
        conn.execute("SELECT set_config('search_path', %s, false)", (os.environ["COURIER_PY_POSTGRES_SCHEMA"],))
        conn.commit()
        return conn

    @staticmethod
    def time(v):
        return v.astimezone(UTC)

    @staticmethod
    def autocommit(conn):
        conn.autocommit = True
        return True

    @staticmethod
    def begin(conn):
        conn.execute("BEGIN")

    def test_the_database_checks_too(self):
        # The database's limit is lower than the client's: courier_write
        # refuses the message with the text the client would give.
        self.conn.execute("SET LOCAL courier.max_payload_bytes = 10")
        m = self.message(payload=b"x" * 20)
        with self.assertRaises(outbox.ValidationError) as raised:
            outbox.write(self.conn, self.message(payload=b"small"), m, limits=outbox.Limits(max_payload_bytes=100))
        self.conn.rollback()
        e = raised.exception
        self.assertEqual(str(e), "outbox: message 2 of 2: courier: message.Payload is 20 bytes, over the limit of 10: "
                                 "store large data elsewhere and send a reference, or raise the limit together with "
                                 "the broker's")
        self.assertEqual((e.field, e.problem, e.index, e.count), ("Payload", "is 20 bytes, over the limit of 10", 2, 2))

    def test_write_wakes_a_waiting_relay(self):
        import psycopg
        relay = psycopg.connect(os.environ["COURIER_PY_POSTGRES_URL"], autocommit=True)
        self.addCleanup(relay.close)
        relay.execute("SELECT set_config('search_path', %s, false)", (os.environ["COURIER_PY_POSTGRES_SCHEMA"],))
        (oid,), = relay.execute("SELECT 'courier_outbox'::regclass::oid::bigint").fetchall()
        # A relay out of work holds this lock and listens (0001, 0005).
        relay.execute("SELECT pg_advisory_lock((1668248946::bigint << 32) | %s)", (oid,))
        relay.execute('LISTEN "courier_outbox_%d"' % oid)
        got = []
        relay.add_notify_handler(lambda n: got.append(n.channel))
        outbox.write(self.conn, self.message())
        self.conn.commit()
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            select.select([relay.fileno()], [], [], 1)  # until the notification arrives
            relay.execute("SELECT 1")  # which psycopg 3.1 reads with a statement's reply
        self.assertEqual(got, ["courier_outbox_%d" % oid])


if __name__ == "__main__":
    unittest.main()
