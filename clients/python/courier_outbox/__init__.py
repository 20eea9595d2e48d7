"""Write messages to Courier's outbox from Python, in your own transaction.

Courier's Go relay publishes what you write here exactly as it publishes
what a Go service writes: the rows are the same, and so are the checks and
their error texts (see docs/contract.md and testdata/contract/v1 in
Courier's repository).

    import courier_outbox as outbox

    with conn.transaction():          # psycopg 3; PyMySQL, MySQLdb, sqlite3 alike
        conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", ("order-42", 1999))
        outbox.write(conn, outbox.Message("orders", "order-42", "OrderPlaced",
                                          {"order_id": "order-42", "total": 1999}))

On PostgreSQL each message goes through the courier_write and
courier_schedule functions (``courier migrate`` creates them), which check
it again and wake the relays; on MySQL, MariaDB and SQLite the client
inserts the rows Go's inserters insert. Either way the client checks every
message first and writes nothing when one is invalid.
"""

import datetime

from .dialects import check_transaction, dialect_of
from .errors import ValidationError
from .limits import DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_PAYLOAD_BYTES, Limits
from .message import (CONTENT_TYPE_BINARY, CONTENT_TYPE_JSON, HEADER_CAUSATION_ID, HEADER_CORRELATION_ID,
                      HEADER_TRACE_PARENT, HEADER_TRACE_STATE, Message)
from .validate import check_header_name, validate

__all__ = [
    "Message", "write", "schedule", "ValidationError", "Limits", "validate", "check_header_name",
    "CONTENT_TYPE_JSON", "CONTENT_TYPE_BINARY", "DEFAULT_MAX_PAYLOAD_BYTES", "DEFAULT_MAX_HEADER_BYTES",
    "HEADER_TRACE_PARENT", "HEADER_TRACE_STATE", "HEADER_CORRELATION_ID", "HEADER_CAUSATION_ID",
]


def write(tx, *messages, limits=None):
    """Write messages to the outbox in tx, in the order given; the relay
    publishes them once tx commits, and never if it rolls back.

    Args:
        tx: a connection or cursor, inside the caller's transaction, of
            psycopg 3 (PostgreSQL), PyMySQL or MySQLdb (MySQL, MariaDB) or
            sqlite3 (SQLite).
        messages: Message values; none is a no-op.
        limits: Limits, default the defaults (1 MiB payloads, 64 KiB of
            headers).

    Raises:
        ValidationError: a message is invalid; nothing was written. Its
            text is the Go Writer's for the same messages.
        TypeError: tx is not a connection or cursor of a supported driver,
            its connection commits each statement by itself (autocommit
            outside a transaction), or a message is not a Message.
        The driver's own errors, such as a missing table (run
            ``courier migrate``).
    """
    _write(tx, None, messages, limits)


def schedule(tx, due, *messages, limits=None):
    """Write messages in tx to be published at or after due, in the order
    given; they occur (occurred_at, once published) at their due time.

    Args:
        tx: as for write.
        due: an aware datetime (publish at that moment) or a positive
            timedelta (that long after this call, by the database's clock on
            PostgreSQL and MySQL, by this process's on SQLite).
        messages, limits: as for write.

    Raises:
        ValueError: due is a naive datetime or not a positive timedelta.
        ValidationError, TypeError and the driver's errors: as for write.
    """
    if isinstance(due, datetime.timedelta):
        if due <= datetime.timedelta(0):
            raise ValueError("outbox: schedule: the due time is %s, not after now: give a timedelta > 0 or an aware "
                             "datetime, or write the messages to publish them at once" % due)
    elif isinstance(due, datetime.datetime):
        if due.tzinfo is None:
            raise ValueError("outbox: schedule: the due time %s has no time zone: give an aware datetime such as "
                             "datetime.now(timezone.utc) + timedelta(hours=1)" % due.isoformat())
        due = due.astimezone(datetime.timezone.utc)
    else:
        raise ValueError("outbox: schedule: the due time is %r: give an aware datetime (at) or a timedelta (after)"
                         % (due,))
    _write(tx, due, messages, limits)


def _write(tx, due, messages, limits):
    if not messages:
        return
    dialect, is_cursor = dialect_of(tx)
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise TypeError("courier_outbox: message %d of %d is a %s, not a courier_outbox.Message"
                            % (i + 1, len(messages), type(m).__name__))
        try:
            validate(m, limits)
        except ValidationError as e:
            raise e.in_write(i + 1, len(messages)) from None
    cur = tx if is_cursor else tx.cursor()
    try:
        check_transaction(dialect, cur)
        if due is None:
            dialect.write(cur, list(messages))
        else:
            dialect.schedule(cur, due, list(messages))
    finally:
        if not is_cursor:
            cur.close()
