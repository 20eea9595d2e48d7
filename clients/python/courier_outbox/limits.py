"""The bounds a message must stay within."""

from dataclasses import dataclass

DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
DEFAULT_MAX_HEADER_BYTES = 64 << 10
MAX_NAME_BYTES = 255
MAX_KEY_BYTES = 1024


@dataclass(frozen=True)
class Limits:
    """Bounds on what a write accepts; 0 (or less) means the default.

    Attributes:
        max_payload_bytes: the payload's size cap, default 1 MiB (NATS's
            default max_payload); raise it only with the broker's limit.
        max_header_bytes: the cap on the headers' names and values, added
            up, default 64 KiB.
    """

    max_payload_bytes: int = 0
    max_header_bytes: int = 0

    def with_defaults(self):
        """These limits with each unset one at its default."""
        return Limits(
            self.max_payload_bytes if self.max_payload_bytes > 0 else DEFAULT_MAX_PAYLOAD_BYTES,
            self.max_header_bytes if self.max_header_bytes > 0 else DEFAULT_MAX_HEADER_BYTES,
        )
