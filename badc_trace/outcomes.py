"""Outcomes: what the caller sees, written `TOKEN TOKEN ...|CODE` (e.g. `3 4 5|length`, `|eos`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

CRASH = "crash"
# One grammar, ASCII only: a token id is 0 or digits without a leading zero (so "03", "٣" and "３" are not
# three other spellings of "3"), at most 10 digits; a code is printable ASCII without space or "|".
_TOKENS = re.compile(r"(?:0|[1-9][0-9]{0,9})(?: (?:0|[1-9][0-9]{0,9}))*", re.ASCII)
_CODE = re.compile(r"[!-{}~]+", re.ASCII)  # printable ASCII but "|" (0x7c)


class OutcomeError(ValueError):
    pass


@dataclass(frozen=True)
class Outcome:
    tokens: tuple[int, ...]
    code: str

    @property
    def crash(self) -> bool:
        return is_crash_code(self.code)

    def __str__(self) -> str:
        return format_outcome(self.tokens, self.code)


def is_crash_code(code: str) -> bool:
    """`crash`, or `crash:DETAIL` naming the exception."""
    return code == CRASH or code.startswith(CRASH + ":")


def format_outcome(tokens: tuple[int, ...] | list[int], code: str) -> str:
    return " ".join(str(t) for t in tokens) + "|" + code


def parse_outcome(text: str) -> Outcome:
    """Parse one outcome string; raises OutcomeError saying what is wrong."""
    if not isinstance(text, str):  # before the cache: a list is not even hashable
        raise OutcomeError(f"outcome {text!r} is not a string")
    return _parse(text)


@lru_cache(maxsize=1 << 16)
def _parse(text: str) -> Outcome:
    head, sep, code = text.rpartition("|")
    if not sep:
        raise OutcomeError(f"outcome {text[:60]!r} has no '|' before its termination code")
    if not _CODE.fullmatch(code):
        raise OutcomeError(f"outcome {text[:60]!r}: termination code {code[:40]!r} must be a non-empty word of "
                           "printable ASCII")
    tokens: tuple[int, ...] = ()
    if head:
        if not _TOKENS.fullmatch(head):
            raise OutcomeError(f"outcome {text[:60]!r}: tokens must be ASCII integers without leading zeros (at most "
                               "10 digits), separated by one space")
        tokens = tuple(int(p) for p in head.split(" "))
    return Outcome(tokens, code)
