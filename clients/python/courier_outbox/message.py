"""A message, built as Courier's Go constructors build one."""

import datetime
import json
import uuid

from .ids import uuid7

CONTENT_TYPE_JSON = "application/json"
CONTENT_TYPE_BINARY = "application/octet-stream"

# Header names Courier understands.
HEADER_TRACE_PARENT = "traceparent"
HEADER_TRACE_STATE = "tracestate"
HEADER_CORRELATION_ID = "Courier-Correlation-Id"
HEADER_CAUSATION_ID = "Courier-Causation-Id"

UTC = datetime.timezone.utc
# Go's zero time, which stands for "not set".
ZERO_TIME = datetime.datetime(1, 1, 1, tzinfo=UTC)


class Message:
    """One message for the outbox.

    Args:
        topic: the stream of messages it belongs to, such as "orders".
        key: the ordering key, usually the aggregate id ("order-42").
        type: the payload's schema, such as "OrderPlaced".
        payload: bytes (sent as they are, content type
            application/octet-stream); a str (its UTF-8 bytes, also
            application/octet-stream); a dict or list (encoded as JSON,
            application/json); None (no payload).
        headers: a dict of str to str, or None.
        id: a uuid.UUID or its text; default a new UUIDv7.
        version: the payload schema's version, default 1.
        content_type: the payload's media type, overriding the one the
            payload's kind gives.
        occurred_at: when the event happened, a timezone-aware datetime;
            default now. It is kept in UTC, to the microsecond.

    Nothing is checked here but the argument types: write and schedule
    validate every message, with Go's checks and texts.
    """

    __slots__ = ("id", "topic", "key", "type", "version", "content_type", "payload", "headers", "occurred_at")

    def __init__(self, topic, key, type, payload=None, headers=None, id=None, version=1,
                 content_type=None, occurred_at=None):
        for name, value in (("topic", topic), ("key", key), ("type", type)):
            if not isinstance(value, str):
                raise TypeError("courier_outbox: Message %s must be a str, not %s" % (name, _kind(value)))
        payload, kind = _encode_payload(payload)
        if content_type is None:
            content_type = kind
        elif not isinstance(content_type, str):
            raise TypeError("courier_outbox: Message content_type must be a str, not %s" % _kind(content_type))
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError("courier_outbox: Message version must be an int, not %s" % _kind(version))
        if headers is not None:
            if not isinstance(headers, dict):
                raise TypeError("courier_outbox: Message headers must be a dict of str to str, not %s" % _kind(headers))
            for name, value in headers.items():
                if not isinstance(name, str) or not isinstance(value, str):
                    raise TypeError("courier_outbox: Message headers must be a dict of str to str: %r: %r" % (name, value))
            headers = dict(headers)
        if id is None:
            id = uuid7()
        elif isinstance(id, str):
            id = uuid.UUID(id)
        elif not isinstance(id, uuid.UUID):
            raise TypeError("courier_outbox: Message id must be a uuid.UUID or its text, not %s" % _kind(id))
        if occurred_at is None:
            occurred_at = datetime.datetime.now(UTC)
        elif not isinstance(occurred_at, datetime.datetime) or occurred_at.tzinfo is None:
            raise TypeError("courier_outbox: Message occurred_at must be a timezone-aware datetime, "
                            "such as datetime.now(timezone.utc), not %r" % (occurred_at,))
        self.id = id
        self.topic = topic
        self.key = key
        self.type = type
        self.version = version
        self.content_type = content_type
        self.payload = payload
        self.headers = headers or None
        self.occurred_at = occurred_at.astimezone(UTC) if occurred_at != ZERO_TIME else ZERO_TIME

    def __repr__(self):
        return "Message(id=%s, topic=%r, key=%r, type=%r, %d bytes)" % (
            self.id, self.topic, self.key, self.type, len(self.payload))


def _encode_payload(payload):
    """The payload's bytes and the content type its kind gives."""
    if payload is None:
        return b"", CONTENT_TYPE_BINARY
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload), CONTENT_TYPE_BINARY
    if isinstance(payload, str):
        return payload.encode("utf-8"), CONTENT_TYPE_BINARY
    if isinstance(payload, (dict, list)):
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8"), CONTENT_TYPE_JSON
    raise TypeError("courier_outbox: Message payload must be bytes, str, dict, list or None, not %s" % _kind(payload))


def _kind(value):
    return type(value).__name__
