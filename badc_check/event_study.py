"""The returned-output event study of the paper's Supplement F, for models without an exact law.

One event of the first returned token, fixed from a pilot before any study request; three arms (ordinary
decoding, native speculation, and speculation with the frozen repair as the history control). Three
two-sided Clopper-Pearson intervals with alpha/6 in each tail hold together at 1 - alpha by the union
bound (within-arm i.i.d. indicators; no cross-arm independence needed). From them: the signed gap
p_ordinary - p_native lies in [l0 - us, u0 - ls], and the control's absolute gap |p_history - p_ordinary| is
at most max(|lh - u0|, |uh - l0|). The gap is shown when its lower bound exceeds `gap_threshold`; the
control is within when that upper bound is below `control_threshold` (the paper: 5 and 10 points).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from badc_check.bounds import Interval, cp_interval
from badc_trace.outcomes import parse_outcome

ARMS = ("ordinary", "native", "history")


def first_token(outcome: str) -> int | None:
    o = parse_outcome(outcome)
    return None if o.crash or not o.tokens else o.tokens[0]


def modal_first_token(pilot: Mapping[str, int]) -> int:
    """The frozen event rule: the first returned token most frequent in the pilot (ties: the lowest id)."""
    counts: Counter[int] = Counter()
    for y, k in pilot.items():
        t = first_token(y)
        if t is not None:
            counts[t] += k
    if not counts:
        raise ValueError("the pilot returned no token: no first-token event can be fixed")
    return min(counts, key=lambda t: (-counts[t], t))


def event_count(outcomes: Mapping[str, int], event: frozenset[int]) -> int:
    return sum(k for y, k in outcomes.items() if first_token(y) in event)


@dataclass(frozen=True)
class EventStudy:
    event: tuple[int, ...]  # first-token ids, fixed from the pilot
    alpha: float
    intervals: dict[str, Interval]  # per arm, simultaneous at 1 - alpha
    gap: tuple[float, float]  # bounds on p_ordinary - p_native
    control_gap: float  # empirical |p_history - p_ordinary|
    control_ub: float  # upper bound on |p_history - p_ordinary|
    gap_threshold: float
    control_threshold: float

    @property
    def gap_shown(self) -> bool:
        return self.gap[0] > self.gap_threshold

    @property
    def control_within(self) -> bool:
        return self.control_ub < self.control_threshold

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gap_shown": self.gap_shown, "control_within": self.control_within}


def event_study(arms: Mapping[str, Mapping[str, int]], event: frozenset[int], *, alpha: float = 0.05,
                gap_threshold: float = 0.05, control_threshold: float = 0.10) -> EventStudy:
    """The study from each arm's outcome counts (keys ARMS) and the frozen first-token event."""
    missing = [a for a in ARMS if a not in arms]
    if missing:
        raise ValueError(f"event study: arms {', '.join(missing)} missing (needs {', '.join(ARMS)})")
    tail = alpha / 6  # three two-sided intervals: six endpoints
    iv = {a: cp_interval(event_count(arms[a], event), sum(arms[a].values()), tail) for a in ARMS}
    o, s, h = iv["ordinary"], iv["native"], iv["history"]
    return EventStudy(event=tuple(sorted(event)), alpha=alpha, intervals=iv, gap=(o.low - s.high, o.high - s.low),
                      control_gap=abs(h.estimate - o.estimate),
                      control_ub=max(abs(h.low - o.high), abs(h.high - o.low)),
                      gap_threshold=gap_threshold, control_threshold=control_threshold)
