"""What courier_outbox does before it reaches a database: building
messages as Go's constructors do, and refusing what it cannot write."""

import datetime
import json
import sqlite3
import unittest
import uuid

import courier_outbox as outbox
from courier_outbox import columns
from courier_outbox.ids import uuid7

UTC = datetime.timezone.utc


class Messages(unittest.TestCase):
    def test_payload_kinds(self):
        for payload, data, content_type in (
            (b"\x00\xff", b"\x00\xff", "application/octet-stream"),
            (bytearray(b"ab"), b"ab", "application/octet-stream"),
            ("naïve", "naïve".encode(), "application/octet-stream"),
            ({"total": 1999, "note": "ü"}, '{"total":1999,"note":"ü"}'.encode(), "application/json"),
            ([1, "two"], b'[1,"two"]', "application/json"),
            (None, b"", "application/octet-stream"),
        ):
            with self.subTest(payload=payload):
                m = outbox.Message("orders", "order-42", "OrderPlaced", payload)
                self.assertEqual((m.payload, m.content_type), (data, content_type))
        m = outbox.Message("orders", "k", "T", {"a": 1}, content_type="application/vnd.shop+json")
        self.assertEqual(m.content_type, "application/vnd.shop+json")

    def test_defaults(self):
        before = datetime.datetime.now(UTC)
        m = outbox.Message("orders", "k", "T", b"")
        self.assertEqual((m.version, m.headers), (1, None))
        self.assertEqual(m.id.version, 7)
        self.assertLessEqual(before, m.occurred_at)
        self.assertEqual(m.occurred_at.tzinfo, UTC)

    def test_explicit_fields(self):
        at = datetime.datetime(2026, 3, 1, 10, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
        m = outbox.Message("orders", "k", "T", b"", id="0195f3a2-7c00-7000-8000-000000000001", version=3,
                           headers={"x-a": "b"}, occurred_at=at)
        self.assertEqual(m.id, uuid.UUID("0195f3a2-7c00-7000-8000-000000000001"))
        self.assertEqual(m.occurred_at, datetime.datetime(2026, 3, 1, 9, 30, tzinfo=UTC))
        self.assertEqual(m.occurred_at.tzinfo, UTC)
        self.assertEqual((m.version, m.headers), (3, {"x-a": "b"}))

    def test_wrong_types(self):
        for kw in ({"payload": 3}, {"headers": {"a": 1}}, {"headers": [("a", "b")]}, {"id": 7}, {"version": "1"},
                   {"version": True}, {"occurred_at": datetime.datetime(2026, 1, 1)}, {"occurred_at": "2026-01-01"},
                   {"content_type": b"x"}):
            with self.subTest(kw=kw), self.assertRaises(TypeError):
                outbox.Message("orders", "k", "T", **{"payload": b"", **kw})
        with self.assertRaises(TypeError):
            outbox.Message(None, "k", "T", b"")

    def test_uuid7_orders_ids_in_time(self):
        ids = [uuid7() for _ in range(5000)]
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(len(set(ids)), len(ids))
        for i in ids[:10]:
            self.assertEqual((i.version, i.variant), (7, uuid.RFC_4122))

    def test_headers_json_is_gos(self):
        self.assertIsNone(columns.headers_json(None))
        self.assertIsNone(columns.headers_json({}))
        text = columns.headers_json({"b": "<&>", "a": "\u2028\u2029\t\x1f\b\f\x7f", "é": "x"})
        self.assertEqual(text, '{"a":"\\u2028\\u2029\\t\\u001f\\b\\f\x7f","b":"\\u003c\\u0026\\u003e","é":"x"}')
        self.assertEqual(json.loads(text)["b"], "<&>")


class Refusals(unittest.TestCase):
    def test_not_a_driver(self):
        with self.assertRaises(TypeError) as raised:
            outbox.write(object(), outbox.Message("orders", "k", "T", b""))
        self.assertIn("psycopg", str(raised.exception))

    def test_not_a_message(self):
        with self.assertRaises(TypeError) as raised:
            outbox.write(sqlite3.connect(":memory:"), outbox.Message("orders", "k", "T", b""), {"topic": "x"})
        self.assertIn("message 2 of 2", str(raised.exception))

    def test_nothing_to_write(self):
        outbox.write(object())  # no messages: no database, no error
        outbox.schedule(object(), datetime.timedelta(seconds=1))

    def test_asyncio_cursor(self):
        class Cursor:
            async def execute(self, *args):
                raise AssertionError("executed")

            def fetchone(self):
                pass

        Cursor.__module__ = "psycopg.cursor_async"
        with self.assertRaises(TypeError) as raised:
            outbox.write(Cursor(), outbox.Message("orders", "k", "T", b""))
        self.assertIn("asyncio", str(raised.exception))

    def test_validation_error_parts(self):
        e = outbox.ValidationError("Topic", "is empty", 'set a topic such as "orders"')
        self.assertIsInstance(e, ValueError)
        self.assertEqual(str(e), 'courier: message.Topic is empty: set a topic such as "orders"')
        self.assertEqual(str(e.in_write(1, 1)), 'outbox: courier: message.Topic is empty: set a topic such as "orders"')
        self.assertEqual(str(e.in_write(2, 3)),
                         'outbox: message 2 of 3: courier: message.Topic is empty: set a topic such as "orders"')


if __name__ == "__main__":
    unittest.main()
