"""The outbox row's columns and their encodings, as Go's inserters write
them (store/internal/columns)."""

import datetime
import json

from .message import UTC

# The columns that hold a message, in Go's order.
NAMES = ("message_id", "topic", "ordering_key", "type", "version", "content_type", "payload", "headers", "occurred_at")

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = datetime.timedelta(microseconds=1)

# Go's encoding/json escapes these beyond what Python's json does.
_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                             "\u2028": "\\u2028", "\u2029": "\\u2029"})


def headers_json(headers):
    """The headers as the JSON text Go's json.Marshal gives a
    map[string]string (keys sorted, compact, HTML characters escaped), or
    None when there are none."""
    if not headers:
        return None
    return json.dumps(headers, ensure_ascii=False, separators=(",", ":"), sort_keys=True).translate(_GO_ESCAPES)


def unix_micros(t):
    """t, an aware datetime, as microseconds since the Unix epoch."""
    return (t - _EPOCH) // _MICROSECOND


def datetime6(t):
    """t in UTC as MySQL's DATETIME(6) text."""
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def values(m, time):
    """m's column values in NAMES' order, times encoded by time."""
    return [str(m.id), m.topic, m.key, m.type, m.version, m.content_type, m.payload,
            headers_json(m.headers), time(m.occurred_at)]


def chunks(msgs, rows, max_bytes=0):
    """msgs a statement's worth at a time, as Go's inserters split them: at
    most rows messages and, beyond a statement's first, at most max_bytes
    of payloads and headers (0: no bound)."""
    start = 0
    while start < len(msgs):
        end, size = start, 0
        while end < len(msgs) and end - start < rows:
            m = msgs[end]
            n = len(m.payload) + sum(len(k.encode()) + len(v.encode()) for k, v in (m.headers or {}).items())
            if max_bytes and end > start and size + n > max_bytes:
                break
            size += n
            end += 1
        yield msgs[start:end]
        start = end
