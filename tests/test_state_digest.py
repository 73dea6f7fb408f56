"""badc_trace.instrument.state_digest: a processor's state by content, and the same digest as traces written
before (the diff of two traces compares their digests, and committed findings hold old ones)."""

import enum

import numpy as np

from badc_trace.instrument import state_digest


class Kind(enum.IntEnum):
    A = 1


class Cache:
    def __init__(self):
        self.rows = np.arange(6, dtype=np.int32).reshape(2, 3)
        self.seen = {3: [1, 2], "b": (True, None)}


class Processor:
    def __init__(self):
        self.min_tokens, self.eos, self.scale, self.name, self.prompt_len = 3, 2, 1.5, "mt", None
        self.raw, self.flag, self.kind, self.cache, self.step = b"\x01", False, Kind.A, Cache(), np.int64(7)


def test_digest_is_by_content_and_pinned():
    a, b = Processor(), Processor()
    # the digest traces carry for this state (computed with one hash update per piece, before the pieces
    # were joined into one update): leaves, an IntEnum, numpy values, a nested object's dict and array
    assert state_digest(a) == state_digest(b) == "507ad7c8ee5ef8ec"
    b.cache.rows[0, 0] = 9
    assert state_digest(b) == "48f2237a8aa31abf"
    b.min_tokens = 4
    assert state_digest(b) not in ("507ad7c8ee5ef8ec", "48f2237a8aa31abf")
