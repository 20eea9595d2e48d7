"""Go's Message.Validate, check for check and text for text.

The contract's test vectors (testdata/contract/v1/messages.json) hold
every check's text, and this package's tests compare against them, so a
change to Go's checks that is not made here fails there.
"""

import uuid

from .errors import ValidationError
from .limits import MAX_KEY_BYTES, MAX_NAME_BYTES, Limits
from .message import HEADER_CAUSATION_ID, HEADER_CORRELATION_ID, ZERO_TIME

_NIL = uuid.UUID(int=0)

# Go's unicode.IsSpace: Latin-1's white space, then Unicode's White_Space.
_SPACES = frozenset([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
                     *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000])

_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

_HTTP_PREFIXES = ("proxy-", "x-forwarded-", "content-", "sec-", "webhook-", "if-")
_HTTP_NAMES = frozenset([
    "authorization", "www-authenticate", "cookie", "cookie2", "set-cookie", "set-cookie2",
    "host", "forwarded", "via", "max-forwards", "origin", "x-real-ip",
    "x-http-method", "x-http-method-override", "x-method-override", "x-original-url", "x-rewrite-url",
    "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "expect", "range",
    "accept-encoding",
])


def validate(m, limits=None):
    """Raise a ValidationError (text ``courier: message.…``) when m cannot
    be stored and published, with Go's checks in Go's order."""
    limits = (limits or Limits()).with_defaults()
    if m.id == _NIL:
        raise ValidationError("ID", "is the nil UUID",
                              "build messages with courier.NewMessage or courier.NewJSON, which set a UUIDv7")
    _check_name("Topic", m.topic, MAX_NAME_BYTES, False, 'set a topic such as "orders"')
    _check_name("Key", m.key, MAX_KEY_BYTES, True, 'set the ordering key, usually the aggregate id such as "order-42"')
    _check_name("Type", m.type, MAX_NAME_BYTES, False, 'set the message type such as "OrderPlaced"')
    if m.version < 1:
        raise ValidationError("Version", "is %d" % m.version, "use 1 or more (courier.WithVersion)")
    _check_name("ContentType", m.content_type, MAX_NAME_BYTES, True, 'set a media type such as "application/json"')
    if len(m.payload) > limits.max_payload_bytes:
        raise ValidationError("Payload", "is %d bytes, over the limit of %d" % (len(m.payload), limits.max_payload_bytes),
                              "store large data elsewhere and send a reference, or raise the limit together with the broker's")
    if m.occurred_at == ZERO_TIME:
        raise ValidationError("OccurredAt", "is not set", "set when the event happened (courier.WithOccurredAt)")
    size = 0
    for raw, name, value in sorted((_bytes(n), n, v) for n, v in (m.headers or {}).items()):
        value_bytes = _bytes(value)
        size += len(raw) + len(value_bytes)
        check_header_name(name)
        if not _utf8(value) or "\r" in value or "\n" in value or "\x00" in value:
            raise ValidationError(header_field(name), "has a line break, NUL or invalid UTF-8 in its value",
                                  "encode the value (for example base64) or remove the offending characters")
    if size > limits.max_header_bytes:
        raise ValidationError("Headers", "total %d bytes, over the limit of %d" % (size, limits.max_header_bytes),
                              "move bulky metadata into the payload")


def check_header_name(name):
    """Raise a ValidationError when name cannot be a header's name: not an
    HTTP token, or one a transport acts on (Go's CheckHeaderName)."""
    raw = _bytes(name)
    if not raw or any(b not in _TOKEN for b in raw):
        raise ValidationError(header_field(name), "is not a valid header name",
                              "use letters, digits and !#$%&'*+-.^_`|~ only, no spaces or colons")
    if name in (HEADER_CORRELATION_ID, HEADER_CAUSATION_ID):
        return
    lower = name.lower()
    if lower.startswith("courier-") or lower.startswith("nats-"):
        raise ValidationError(header_field(name), "uses a reserved prefix (Courier-, Nats-)",
                              "choose another name; Courier sets these headers itself and brokers act on them")
    if lower.startswith(_HTTP_PREFIXES) or lower in _HTTP_NAMES:
        raise ValidationError(header_field(name),
                              "is a name HTTP acts on (credentials, routing, framing or a webhook signature)",
                              "choose another name; sent as a webhook's request header it would change how the "
                              "request is authenticated, routed or read")


def header_field(name):
    """The field naming header name, quoted the contract's way:
    ``Headers["x-bad name"]``, printable ASCII as it is but for ``"`` and
    ``\\`` (escaped), every other byte of its UTF-8 as ``\\xHH``."""
    out = []
    for b in _bytes(name):
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif 0x20 <= b <= 0x7E:
            out.append(chr(b))
        else:
            out.append("\\x%02x" % b)
    return 'Headers["%s"]' % "".join(out)


def _check_name(field, s, max_bytes, spaces, fix):
    if s == "":
        raise ValidationError(field, "is empty", fix)
    n = len(_bytes(s))
    if n > max_bytes:
        raise ValidationError(field, "is %d bytes, over the limit of %d" % (n, max_bytes), "shorten it")
    if not _utf8(s):
        raise ValidationError(field, "is not valid UTF-8", "use UTF-8 text")
    for ch in s:
        r = ord(ch)
        if r <= 0x1F or 0x7F <= r <= 0x9F:  # Unicode's Cc; a tab is one too
            raise ValidationError(field, "contains a control character (U+%04X)" % r, "remove it")
        if not spaces and r in _SPACES:
            raise ValidationError(field, "contains white space (U+%04X)" % r, "remove it")


def _utf8(s):
    """Whether s is valid Unicode text (no lone surrogates)."""
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _bytes(s):
    """s as UTF-8 bytes, a lone surrogate as the 3 bytes Python's
    surrogateescape-free codecs give it."""
    return s.encode("utf-8", "surrogatepass")
