"""Outcomes: what the caller sees, written `TOKEN TOKEN ...|CODE` (e.g. `3 4 5|length`, `|eos`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

CRASH = "crash"


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


@lru_cache(maxsize=1 << 16)
def parse_outcome(text: str) -> Outcome:
    """Parse one outcome string; raises OutcomeError saying what is wrong."""
    if not isinstance(text, str):
        raise OutcomeError(f"outcome {text!r} is not a string")
    head, sep, code = text.rpartition("|")
    if not sep:
        raise OutcomeError(f"outcome {text!r} has no '|' before its termination code")
    if not code or any(c.isspace() for c in code) or "|" in code:
        raise OutcomeError(f"outcome {text!r}: termination code {code!r} must be a non-empty word")
    tokens: tuple[int, ...] = ()
    if head:
        parts = head.split(" ")
        if not all(p.isdigit() for p in parts):
            raise OutcomeError(f"outcome {text!r}: tokens must be non-negative integers separated by one space")
        tokens = tuple(int(p) for p in parts)
    return Outcome(tokens, code)
