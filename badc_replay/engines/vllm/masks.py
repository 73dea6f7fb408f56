"""Which tokens a row of sequential decoding masks (vLLM's `Sampler`): one rule for the kernel (live) and
the contract replay (offline)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def banned(out: Sequence[int], stops: Iterable[int], allowed: frozenset[int] | None,
           bad_words: Sequence[tuple[int, ...]], vocab: int) -> set[int]:
    """The tokens sequential decoding masks after output `out` (vLLM's Sampler): `stops` (given while
    min_tokens holds), every token outside `allowed`, and the last token of each bad word whose other
    tokens end the output (bad words match generated tokens only, not the prompt)."""
    found = set(stops)
    if allowed is not None:
        found |= set(range(vocab)) - allowed
    for w in bad_words:
        k = len(w) - 1
        if k <= len(out) and tuple(out[len(out) - k:]) == w[:k]:
            found.add(w[-1])
    return found
