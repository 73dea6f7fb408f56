"""The exact channel's leaf types: the speculation-on law mu enumerated through the live engine.

An engine computes mu by running its own speculative loop (drafter, processors, cache crops, stop rules)
with only its random draws scripted (badc_replay/enumeration.py), exactly as P is enumerated from the
speculation-off engine. Where it cannot do so soundly it raises `ExactUnavailable` with the status and
the reason, which the report carries: nothing is silently skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The statuses a config's exact channel can have (docs/statistics.md, "Exact channel").
DIFFERS, EQUAL_WITHIN_TOL, UNEXERCISED = "DIFFERS", "EQUAL_WITHIN_TOL", "UNEXERCISED"
NOT_ENUMERABLE, UNSUPPORTED = "NOT_ENUMERABLE", "UNSUPPORTED"
STATUSES = (DIFFERS, EQUAL_WITHIN_TOL, UNEXERCISED, NOT_ENUMERABLE, UNSUPPORTED)

# The default tolerance, sealed with a campaign that runs the exact channel ([campaign] exact_tol). Chosen from measured
# differences (docs/statistics.md): the largest on any control, on any build, is 4.72e-7 (LCP-6 on
# llama-cpp-python 0.3.19, block against step logits in float32); the smallest real difference is 2.79e-3
# (HF17-P1). 1e-5 is 21 times the first and 279 times below the second.
EXACT_TOL = 1e-5


class ExactUnavailable(Exception):
    """The engine cannot enumerate this config's speculation-on law soundly: `status` NOT_ENUMERABLE (too
    many paths: a trained checkpoint) or UNSUPPORTED (a draw that cannot be scripted soundly), and why."""

    def __init__(self, status: str, reason: str):
        if status not in (NOT_ENUMERABLE, UNSUPPORTED):
            raise ValueError(f"an unavailable exact channel is {NOT_ENUMERABLE} or {UNSUPPORTED}, not {status!r}")
        self.status, self.reason = status, reason
        super().__init__(f"{status}: {reason}")


def tv(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Total variation distance between two laws of outcomes."""
    return 0.5 * sum(abs(a.get(y, 0.0) - b.get(y, 0.0)) for y in set(a) | set(b))


@dataclass(frozen=True)
class Soundness:
    """The enumeration's check: a seeded sample of leaves re-run (with other fillers in the rows the engine
    discards, where rows are pruned) and how many of them reached another outcome; any is an enumeration
    that is not sound (a wrong pruning rule, or an engine whose outcome is not a function of its scripted
    draws): the law is not reported."""

    leaves: int = 0
    mismatches: int = 0
    rule: str = ""  # what the re-run checks, in words


@dataclass(frozen=True)
class SpeculativeLaw:
    """mu: the exact law of returned outcomes of the speculation-on engine (or an arm of it: repaired)."""

    law: dict[str, float]
    paths: int  # engine runs enumerated
    proposed: int  # draft tokens proposed over all enumerated runs (0: no path exercised speculation)
    soundness: Soundness = field(default_factory=Soundness)
    # where a draw could only be scripted through a mirror of the engine's code: which lines; None: none
    mirrored: str | None = None
