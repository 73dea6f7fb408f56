"""Where stop strings end a request in sequential decoding (vLLM's detokenizer, `check_stop_strings`): one
rule for the kernel (live), the `stop` predicate and the contract replay (offline).

Without speculation vLLM's frontend detokenizes one token per step and, once more than `min_tokens`
tokens are out, looks for each stop string (in list order) among the characters that token added
(reaching back len(stop) - 1 characters). The first token that completes a stop string ends the request:
its ids end there, and its text is cut before the stop string (or after it with
`include_stop_str_in_output`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StopMatch:
    token: int  # index of the returned token that completed the stop string
    stop: str  # which stop string
    at: int  # where it starts in the output text


def completed(prev: str, text: str, stops: Sequence[str]) -> tuple[str, int] | None:
    """The stop string (first in list order) that the characters after `prev` in `text` complete, and
    where it starts; None if none does."""
    for s in stops:
        if not s:
            continue
        i = text.find(s, max(0, len(prev) - len(s) + 1))
        if i != -1:
            return s, i
    return None


def first_stop(texts: Sequence[str], stops: Sequence[str], min_tokens: int = 0) -> StopMatch | None:
    """`texts[i]`: the output text of the first i + 1 tokens. The token at which sequential decoding's
    stop-string check ends the request, or None."""
    prev = ""
    for i, text in enumerate(texts):
        if i + 1 > min_tokens and (hit := completed(prev, text, stops)) is not None:
            return StopMatch(i, *hit)
        prev = text
    return None


def returned_text(text: str, match: StopMatch, include: bool) -> str:
    """The text vLLM returns for a request its stop string `match` ended (`text`: the text up to the
    token that completed it)."""
    end = match.at + len(match.stop) if include else match.at
    return text[:end]
