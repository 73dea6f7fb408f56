"""Per-draw seeds: a function of the sealed campaign seed, the config, the arm and the draw's index,
so the roster is the same however draws are spread over workers."""

from __future__ import annotations

import hashlib


def draw_seed(campaign_seed: int, config_id: str, arm: str, index: int) -> int:
    """A 32-bit seed (llama.cpp's sampler seed is uint32; other engines take it as is)."""
    h = hashlib.blake2b(f"{campaign_seed}\x1f{config_id}\x1f{arm}\x1f{index}".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") & 0xFFFFFFFF
