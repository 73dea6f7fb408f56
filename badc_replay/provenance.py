"""Which code drew a shard: a digest of badc's drawing code (badc_trace and badc_replay, the harnesses,
probes, tiny models and frozen repairs), recorded in every shard. A campaign's seal covers its configs,
seeds and settings, not badc itself: a campaign resumed after badc changed has shards drawn by two
versions, and its report says so."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

PACKAGES = ("badc_trace", "badc_replay")


@lru_cache(maxsize=1)
def code_digest() -> str:
    """16 hex digits of SHA-256 over the drawing packages' Python sources (path and content, in path order)."""
    h = hashlib.sha256()
    for name in PACKAGES:
        root = Path(__import__(name).__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()[:16]
