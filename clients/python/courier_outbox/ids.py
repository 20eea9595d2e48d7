"""UUIDv7 message ids, as Go's github.com/google/uuid NewV7 makes them."""

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last = (0, 0)  # (milliseconds, 12-bit sequence) of the latest id


def uuid7():
    """A new UUIDv7: 48 bits of Unix milliseconds, then a 12-bit sequence
    that orders the ids one process makes within a millisecond, then 62
    random bits."""
    global _last
    with _lock:
        ms = time.time_ns() // 1_000_000
        last_ms, seq = _last
        if ms <= last_ms:
            ms, seq = last_ms, seq + 1
            if seq > 0xFFF:
                ms, seq = ms + 1, 0
        else:
            seq = int.from_bytes(os.urandom(2), "big") & 0x3FF
        _last = (ms, seq)
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand
    return uuid.UUID(int=value)
