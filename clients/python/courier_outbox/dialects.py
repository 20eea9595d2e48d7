"""How each database driver writes the outbox: PostgreSQL through the
courier_write and courier_schedule functions, which check each message
again and wake the relays; MySQL, MariaDB and SQLite with the INSERTs of
Go's inserters."""

import datetime
import inspect

from . import columns
from .errors import ValidationError


def dialect_of(tx):
    """The dialect of tx, a connection or cursor of psycopg 3, PyMySQL,
    MySQLdb or sqlite3, and whether tx is a cursor."""
    for cls in type(tx).__mro__:
        root = (cls.__module__ or "").split(".")[0]
        if root in _DIALECTS:
            return _DIALECTS[root], hasattr(tx, "fetchone")
    raise TypeError("courier_outbox: cannot write with %s.%s: pass a connection or cursor of psycopg (3), "
                    "PyMySQL, MySQLdb or sqlite3, inside your transaction"
                    % (type(tx).__module__, type(tx).__qualname__))


def check_transaction(dialect, cur):
    """Raise TypeError when cur's connection would commit each statement
    by itself (autocommit, outside an explicit transaction): the messages
    would not share the caller's transaction, nor each other's; and when
    cur is an asyncio cursor, which this client does not drive."""
    if inspect.iscoroutinefunction(getattr(cur, "execute", None)):
        raise TypeError("courier_outbox: %s is an asyncio cursor: pass a synchronous connection or cursor"
                        % type(cur).__qualname__)
    conn = getattr(cur, "connection", None)
    if conn is not None and dialect.autocommitting(conn):
        raise TypeError("courier_outbox: the connection commits each statement by itself (autocommit), so the "
                        "messages would not be part of your transaction: begin one first (%s)" % dialect.begin)


class Postgres:
    """PostgreSQL, by psycopg 3: one function call a message."""

    begin = "with conn.transaction(): …, or autocommit off"

    @staticmethod
    def autocommitting(conn):
        return bool(conn.autocommit) and conn.info.transaction_status.name == "IDLE"

    _ARGS = "%s, %s, %s, %s, %s::jsonb, %s, %s, %s::uuid, %s::timestamptz"

    @classmethod
    def write(cls, cur, msgs):
        q = "SELECT courier_write(" + cls._ARGS + ")"
        for i, m in enumerate(msgs):
            cls._call(cur, q, cls._args(m), i + 1, len(msgs))

    @classmethod
    def schedule(cls, cur, due, msgs):
        if isinstance(due, datetime.timedelta):
            q = "SELECT courier_schedule(now() + %s::bigint * interval '1 microsecond', " + cls._ARGS + ")"
            first = due // datetime.timedelta(microseconds=1)
        else:
            q = "SELECT courier_schedule(%s::timestamptz, " + cls._ARGS + ")"
            first = due
        for i, m in enumerate(msgs):
            cls._call(cur, q, [first] + cls._args(m), i + 1, len(msgs))

    @staticmethod
    def _args(m):
        return [m.topic, m.key, m.type, m.payload, columns.headers_json(m.headers), m.content_type,
                m.version, str(m.id), m.occurred_at]

    @staticmethod
    def _call(cur, q, args, index, count):
        """Run q; an invalid message (SQLSTATE 22023 naming a column: the
        database's limits are lower than the client's) raises the
        ValidationError the client would have, for message index of count."""
        try:
            cur.execute(q, args)
        except Exception as e:  # psycopg.Error, which this module does not import
            diag = getattr(e, "diag", None)
            if getattr(e, "sqlstate", None) == "22023" and diag is not None and diag.column_name:
                raise ValidationError(diag.column_name, diag.message_detail or "", diag.message_hint or "",
                                      index, count, outbox=True) from e
            raise


class _Inserts:
    """A dialect written with Go's INSERTs: subclasses set the placeholder,
    the chunk bounds, and how times and the clock are written."""

    mark = "%s"
    rows = 500
    max_bytes = 0

    @classmethod
    def write(cls, cur, msgs):
        now_sql, now_args = cls.now()
        for chunk in columns.chunks(msgs, cls.rows, cls.max_bytes):
            cls._insert(cur, "courier_outbox", chunk, ", created_at", [(now_sql, now_args)])

    @classmethod
    def schedule(cls, cur, due, msgs):
        for chunk in columns.chunks(msgs, cls.rows, cls.max_bytes):
            cls._insert(cur, "courier_outbox_scheduled", chunk, ", due_at, created_at", [cls.due(due), cls.now()])

    @classmethod
    def _insert(cls, cur, table, msgs, more, extra):
        row = "(" + ", ".join([cls.mark] * len(columns.NAMES)) + "".join(", " + sql for sql, _ in extra) + ")"
        args = []
        for m in msgs:
            args += columns.values(m, cls.time)
            for _, a in extra:
                args += a
        q = "INSERT INTO %s (%s%s) VALUES %s" % (table, ", ".join(columns.NAMES), more, ", ".join([row] * len(msgs)))
        cur.execute(q, args)


class MySQL(_Inserts):
    """MySQL and MariaDB, by PyMySQL or MySQLdb: times are the server's
    UTC_TIMESTAMP(6); a statement holds at most 500 messages and, beyond
    its first, 1 MiB of payloads and headers."""

    begin = "conn.begin(), or autocommit off, the drivers' default"

    @staticmethod
    def autocommitting(conn):
        status = getattr(conn, "server_status", None)  # PyMySQL's; MySQLdb keeps none
        return bool(conn.get_autocommit()) and status is not None and not status & 1  # SERVER_STATUS_IN_TRANS

    rows = 500
    max_bytes = 1 << 20
    time = staticmethod(columns.datetime6)

    @staticmethod
    def now():
        return "UTC_TIMESTAMP(6)", []

    @staticmethod
    def due(due):
        if isinstance(due, datetime.timedelta):
            return "UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND", [due // datetime.timedelta(microseconds=1)]
        return "%s", [columns.datetime6(due)]


class SQLite(_Inserts):
    """SQLite, by sqlite3: times are this process's clock in Unix
    microseconds; a statement holds at most 1,000 messages."""

    begin = 'conn.execute("BEGIN"), or the default isolation_level'

    @staticmethod
    def autocommitting(conn):
        manual = conn.isolation_level is None or getattr(conn, "autocommit", -1) is True
        return manual and not conn.in_transaction

    mark = "?"
    rows = 1000
    time = staticmethod(columns.unix_micros)

    @staticmethod
    def now():
        return "?", [columns.unix_micros(datetime.datetime.now(datetime.timezone.utc))]

    @staticmethod
    def due(due):
        if isinstance(due, datetime.timedelta):
            due = datetime.datetime.now(datetime.timezone.utc) + due
        return "?", [columns.unix_micros(due)]


_DIALECTS = {"psycopg": Postgres, "pymysql": MySQL, "MySQLdb": MySQL, "sqlite3": SQLite}
