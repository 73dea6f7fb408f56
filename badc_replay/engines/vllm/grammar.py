"""Structured outputs (`structured_outputs = { regex = ... }`): which tokens the grammar allows after an
output, as vLLM's grammar bitmask does: a token whose text keeps the output a prefix of a string of the
language, and EOS once the output is a whole one. One rule for the kernel (live) and the
`structured_outputs` predicate (offline). Needs the `regex` package (partial matching)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> Any:
    import regex

    return regex.compile(pattern)


def is_prefix(pattern: str, text: str) -> bool:
    """Whether `text` can still be completed to a string of the language."""
    return _compiled(pattern).fullmatch(text, partial=True) is not None


def is_whole(pattern: str, text: str) -> bool:
    return _compiled(pattern).fullmatch(text) is not None


def allowed(pattern: str, text: str, pieces: Sequence[str], eos: int) -> frozenset[int]:
    """The tokens the grammar allows after output text `text` (`pieces[t]`: token t's text; special
    tokens have none and only EOS of them is allowed, once the text is whole)."""
    ok = {t for t, p in enumerate(pieces) if p and is_prefix(pattern, text + p)}
    return frozenset(ok | ({eos} if is_whole(pattern, text) else set()))


def violates(pattern: str, decode: Callable[[Sequence[int]], str], tokens: Sequence[int], eos: int) -> bool:
    """A returned output the grammar cannot produce: its text is no prefix of the language, a token without
    text (a special token) other than a final EOS, or EOS before the text is whole."""
    body = list(tokens[:-1]) if tokens and tokens[-1] == eos else list(tokens)
    if any(t == eos or not decode([t]) for t in body) or not is_prefix(pattern, decode(body)):
        return True
    return len(body) < len(tokens) and not is_whole(pattern, decode(body))
