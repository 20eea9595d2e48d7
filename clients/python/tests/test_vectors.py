"""The contract's vectors: every valid message passes the client's checks,
and every invalid one (that Python can express) fails them with exactly the
error Go's Validate and Writer give."""

import unittest

import courier_outbox as outbox
from courier_outbox.validate import validate

from . import vectors


class Vectors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.contract = vectors.load("messages.json")
        cls.limits = outbox.Limits(cls.contract["limits"]["max_payload_bytes"],
                                   cls.contract["limits"]["max_header_bytes"])

    def test_limits_are_the_clients(self):
        got = self.contract["limits"]
        self.assertEqual(got["max_payload_bytes"], outbox.DEFAULT_MAX_PAYLOAD_BYTES)
        self.assertEqual(got["max_header_bytes"], outbox.DEFAULT_MAX_HEADER_BYTES)
        self.assertEqual(got["max_name_bytes"], outbox.limits.MAX_NAME_BYTES)
        self.assertEqual(got["max_key_bytes"], outbox.limits.MAX_KEY_BYTES)

    def test_valid(self):
        self.assertTrue(self.contract["valid"])
        for case in self.contract["valid"]:
            with self.subTest(case["name"]):
                validate(vectors.message(case["message"]), self.limits)

    def test_invalid(self):
        ran = 0
        for case in self.contract["invalid"]:
            if "python" in case.get("not_in", []):
                continue
            with self.subTest(case["name"]):
                ran += 1
                m = vectors.message(case["message"])
                want = case["error"]
                with self.assertRaises(outbox.ValidationError) as raised:
                    validate(m, self.limits)
                e = raised.exception
                self.assertEqual((e.field, e.problem, e.fix), (want["field"], want["problem"], want["fix"]))
                self.assertEqual(str(e), want["error"])
                # write raises the Writer's error, before it touches the
                # database (a cursor that fails any statement).
                with self.assertRaises(outbox.ValidationError) as raised:
                    outbox.write(_RefusingCursor(), m, limits=self.limits)
                self.assertEqual(str(raised.exception), want["writer"])
        self.assertGreater(ran, 50)

    def test_batches(self):
        for case in self.contract.get("batches", []):
            with self.subTest(case["name"]):
                msgs = vectors.messages(case)
                with self.assertRaises(outbox.ValidationError) as raised:
                    outbox.write(_RefusingCursor(), *msgs, limits=self.limits)
                e = raised.exception
                self.assertEqual(str(e), case["error"]["writer"])
                self.assertEqual((e.index, e.count), (case["index"], len(msgs)))
                self.assertEqual(e.validation_text, case["error"]["error"])


class _RefusingCursor:
    """A sqlite3 cursor in type, whose statements fail the test."""

    def fetchone(self):
        raise AssertionError("read from the database")

    def execute(self, *args):
        raise AssertionError("wrote to the database: %r" % (args[0],))


_RefusingCursor.__module__ = "sqlite3"

if __name__ == "__main__":
    unittest.main()
