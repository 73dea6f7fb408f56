"""Channel S (structural witnesses and the differential bound D) and channel R (records)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import numpy as np

from badc_check.bounds import cp_lower, cp_upper, cs_lower, cs_upper
from badc_check.events import EventFamily

# A predicate names the outcomes that violate a documented contract: a collection of outcome strings
# or a function of one outcome string.
Predicate = Collection[str] | Callable[[str], bool]


def _violates(pred: Predicate, y: str) -> bool:
    return bool(pred(y)) if callable(pred) else y in pred


def violates_any(predicates: Mapping[str, Predicate]) -> Callable[[str], bool]:
    """Membership in the contract-violation event: the outcomes that violate a registered predicate."""
    preds = list(predicates.values())
    return lambda y: any(_violates(p, y) for p in preds)


@dataclass(frozen=True)
class Witnesses:
    """On-arm outcomes with P = 0 that violate a registered predicate no off-arm outcome violates."""

    count: int  # draws
    outcomes: dict[str, int]  # witness outcome -> on-arm count
    predicates: tuple[str, ...]  # predicates with witnesses
    numerical_zeros: int  # on-arm draws with P = 0 that violate nothing: never witnesses
    checked: bool  # False when there is no reference law to say P = 0


def find_witnesses(on: Mapping[str, int], off: Mapping[str, int], reference: Mapping[str, float] | None,
                   predicates: Mapping[str, Predicate]) -> Witnesses:
    if reference is None:
        return Witnesses(0, {}, (), 0, False)
    live = {name: p for name, p in predicates.items()
            if not any(k and _violates(p, y) for y, k in off.items())}
    found: dict[str, int] = {}
    names: set[str] = set()
    zeros = 0
    for y, k in on.items():
        if not k or reference.get(y, 0.0) > 0:
            continue
        hit = [name for name, p in live.items() if _violates(p, y)]
        if hit:
            found[y] = k
            names.update(hit)
        elif not any(_violates(p, y) for p in predicates.values()):
            zeros += k
    return Witnesses(sum(found.values()), found, tuple(sorted(names)), zeros, True)


@dataclass(frozen=True)
class ChannelS:
    D: float  # max over the family of L_on(A) - U_off(A): a lower bound on the returned-output TV
    D_crash_free: float  # over crash-free events (E4)
    argmax: str  # the event attaining D
    argmax_crash_free: str
    tail: float  # per-bound level alpha / (m B)
    lower_on: np.ndarray = field(repr=False)
    upper_off: np.ndarray = field(repr=False)
    lower_off: np.ndarray = field(repr=False)


def channel_s(family: EventFamily, on_counts: np.ndarray, n_on: int, off_counts: np.ndarray, n_off: int,
              tail: float, crash_free: np.ndarray, anytime: bool = False) -> ChannelS:
    lower, upper = (cs_lower, cs_upper) if anytime else (cp_lower, cp_upper)
    l_on = lower(on_counts, n_on, tail)
    u_off = upper(off_counts, n_off, tail)
    l_off = lower(off_counts, n_off, tail)
    gap = l_on - u_off
    i = int(np.argmax(gap))
    cf = np.where(crash_free, gap, -np.inf)
    j = int(np.argmax(cf))
    return ChannelS(float(gap[i]), float(cf[j]), family.events[i].id, family.events[j].id, tail,
                    l_on, u_off, l_off)


@dataclass(frozen=True)
class RecordArm:
    """Per-token record checks of one arm against the documented record function r_E."""

    draws: int
    mismatch: int  # draws with any record differing from r_E
    positions: dict[int, int] = field(default_factory=dict)  # position -> draws mismatching there


@dataclass(frozen=True)
class ChannelR:
    status: str  # complete | incomplete | not_returned
    failed: bool
    gap: float | None  # max over record events of L_on - U_off
    events: int  # record events (each adds two bounds to B)


def record_events(on: RecordArm | None, off: RecordArm | None) -> list[str]:
    if on is None or off is None:
        return []
    return ["any"] + [f"pos={p}" for p in sorted(set(on.positions) | set(off.positions))]


def channel_r(status: str, on: RecordArm | None, off: RecordArm | None, tail: float,
              anytime: bool = False) -> ChannelR:
    """A record failure needs L_on - U_off > 0 on the any-mismatch or a per-position event."""
    if status != "complete" or on is None or off is None:
        return ChannelR(status, False, None, 0)
    lower, upper = (cs_lower, cs_upper) if anytime else (cp_lower, cp_upper)
    names = record_events(on, off)
    k_on = np.array([on.mismatch] + [on.positions.get(int(n[4:]), 0) for n in names[1:]])
    k_off = np.array([off.mismatch] + [off.positions.get(int(n[4:]), 0) for n in names[1:]])
    gap = lower(k_on, on.draws, tail) - upper(k_off, off.draws, tail)
    return ChannelR(status, bool((gap > 0).any()), float(gap.max()), len(names))
