"""The contract's test vectors (testdata/contract/v1), which Go's tests
generate: messages as JSON, with the errors Go's Validate and Writer give."""

import base64
import datetime
import json
import os

import courier_outbox as outbox

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CONTRACT = os.environ.get("COURIER_CONTRACT_DIR", os.path.join(ROOT, "testdata", "contract", "v1"))


def load(name):
    """The vector file name, decoded (from COURIER_CONTRACT_DIR when set,
    else the repository's testdata/contract/v1)."""
    path = os.path.join(CONTRACT, name)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def text(v):
    """A vector's string: as it is, {"repeat": s, "count": n} (s repeated
    n times) or {"base64": b} (the UTF-8 text of the bytes b)."""
    if isinstance(v, dict):
        if "base64" in v:
            return base64.b64decode(v["base64"]).decode("utf-8")
        return v["repeat"] * v["count"]
    return v


def payload(v):
    """A vector's payload_base64: the bytes of its base64 text, or
    {"repeat": s, "count": n} (the bytes of s repeated n times)."""
    if isinstance(v, dict):
        if "base64" in v:
            return base64.b64decode(v["base64"])
        return v["repeat"].encode("utf-8") * v["count"]
    return base64.b64decode(v)


def when(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))


def message(m):
    """The Message a vector's M describes, every field as given."""
    headers = m.get("headers")
    if headers is not None:
        headers = {text(k): text(v) for k, v in headers.items()}
    return outbox.Message(
        text(m["topic"]), text(m["key"]), text(m["type"]), payload(m["payload_base64"]), headers=headers, id=m["id"],
        version=m["version"], content_type=text(m["content_type"]), occurred_at=when(m["occurred_at"]))


def messages(case):
    """The messages of a vector case: "messages" (several) or "message"."""
    if "messages" in case:
        return [message(m) for m in case["messages"]]
    return [message(case["message"])]
