"""Frozen-repair confirmation on fresh draws (paper §4.4, Table 3).

A cause is confirmed when, with its own error budget: speculation is exercised on the unrepaired and
repaired arms; the fresh off arm calibrates over the full family; the unrepaired engine recurs
(L_on - U_off > 0.01 on a frozen crash-free event, or fresh witnesses); and the repaired arm's gap to
the off arm has a simultaneous upper bound <= 0.01 on every frozen event, and its witness rate an
upper bound <= 1e-4.

With `confirm_anytime` (a campaign key, sealed), recurrence is judged at planned looks (looks.py) on
prefixes of the two fresh unrepaired arms, each look with its share of the recurrence bounds' tail, so
the unrepaired arm stops at its first look that recurs; the gap, witness and calibration bounds stay on
the whole arms. The recurrence's U_off on a prefix is then a bound of its own: six per frozen event.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from badc_check.bounds import cp_lower, cp_upper
from badc_check.calibration import calibrate
from badc_check.channels import Predicate, find_witnesses
from badc_check.events import EventFamily
from badc_check.looks import Look

GAP_LIMIT = 0.01
WITNESS_LIMIT = 1e-4


@dataclass(frozen=True)
class RepairResult:
    id: str
    confirmed: bool
    recurrence: float | None  # max over frozen crash-free events of L_on - U_off
    recurrence_witnesses: int | None
    gap_ub: float | None  # simultaneous upper bound on the repaired arm's gap to the off arm
    witness_ub: float | None  # upper bound on the repaired arm's witness rate
    calibration_passed: bool | None
    exercised: bool
    reasons: tuple[str, ...]
    attempted: bool = True  # False: stage S3 gave this config no attempt (the reasons say why)
    delta_b: dict | None = None  # badc_check/delta_b.py on the confirmation arms, beside (never in) the rule
    recurrence_look: dict | None = None  # under confirm_anytime: the look recurrence was judged at
    # the repaired arm's trace replay (its own channel, beside the rule, never in it): whether the repaired
    # engine's calls keep the sequential contract, e.g. {"status": "held", "calls": 932973, "violations": 0}
    contract: dict | None = None

    def to_dict(self) -> dict:
        return {"id": self.id, "attempted": self.attempted, "confirmed": self.confirmed,
                "recurrence": self.recurrence, "gap_ub": self.gap_ub, "witness_ub": self.witness_ub,
                "recurrence_witnesses": self.recurrence_witnesses,
                "calibration_passed": self.calibration_passed, "exercised": self.exercised,
                "reasons": list(self.reasons), "delta_b": self.delta_b, "recurrence_look": self.recurrence_look,
                "contract": self.contract}


def not_attempted(repair_id: str, why: str) -> RepairResult:
    """A registered repair that got no confirmation attempt: never confirmed, with the reason."""
    return RepairResult(repair_id, False, None, None, None, None, None, False, (why,), attempted=False)


def bounds_for_confirmation(family: EventFamily, frozen: Sequence[str], looks: bool = False) -> int:
    """Per frozen event: L_on, U_off (recurrence), U_rep, L_rep, L_off (gap), and with `looks` the gap's
    own U_off on the whole off arm (the recurrence's is on a prefix); one witness-rate bound; and the fresh
    off arm's calibration over the full family."""
    return _bounds(len(frozen), len(family), looks)


def least_bounds(looks: bool = False) -> int:
    """The fewest bounds a confirmation can have: one frozen event in a family of two (an event and its
    complement)."""
    return _bounds(1, 2, looks)


def _bounds(frozen: int, family: int, looks: bool) -> int:
    return (6 if looks else 5) * frozen + 1 + family


def least_confirm_draws(alpha: float, m: int, looks: bool = False) -> int:
    """The fewest draws per repaired arm with which any repair can be confirmed at `alpha` over `m`
    attempts: with fewer, even a repaired arm without a single witness has a witness-rate upper bound
    above WITNESS_LIMIT, so every attempt ends "not confirmed" whatever the repair does. Taken at the
    loosest tail a confirmation can have (least_bounds), so a real family needs at least this many."""
    tail = alpha / (m * least_bounds(looks))
    return math.ceil(math.log(tail) / math.log1p(-WITNESS_LIMIT))


def recurrence(family: EventFamily, frozen: Sequence[str], off: Mapping[str, int], on: Mapping[str, int],
               tail: float, reference: Mapping[str, float] | None,
               predicates: Mapping[str, Predicate]) -> tuple[float, int]:
    """The unrepaired arm's recurrence: the largest L_on - U_off at `tail` over the frozen crash-free
    events (-inf when none is crash-free), and its fresh witnesses against the off arm."""
    idx = np.array([family.index[e] for e in frozen], dtype=np.int64)
    cf = family.crash_free(off, on)[idx]
    rec = cp_lower(family.counts(on)[idx], sum(on.values()), tail) - \
        cp_upper(family.counts(off)[idx], sum(off.values()), tail)
    return (float(rec[cf].max()) if cf.any() else float("-inf")), find_witnesses(on, off, reference, predicates).count


def recurs(rec: float, witnesses: int) -> bool:
    """The recurrence rule: L_on - U_off > GAP_LIMIT on a frozen crash-free event, or a fresh witness."""
    return rec > GAP_LIMIT or witnesses > 0


def confirm_repair(repair_id: str, family: EventFamily, frozen: Sequence[str],
                   reference: Mapping[str, float] | None, predicates: Mapping[str, Predicate],
                   off: Mapping[str, int], on: Mapping[str, int], repaired: Mapping[str, int], *,
                   proposed_on: int | None, proposed_repaired: int | None, alpha: float, m: int,
                   off_violations: int = 0, look: Look | None = None,
                   off_prefix: Mapping[str, int] | None = None) -> RepairResult:
    """The confirmation rule on the fresh arms. With `look` (confirm_anytime), `on` is the unrepaired
    arm's prefix at that look and `off_prefix` the off arm's, on which recurrence is judged with the
    look's share of its tail; `off` is the whole off arm, for the gap and calibration."""
    unknown = [e for e in frozen if e not in family.index]
    if unknown:
        raise ValueError(f"repair {repair_id}: frozen events not in the family: {', '.join(unknown)}")
    if (look is None) != (off_prefix is None):
        raise ValueError("a recurrence look needs the off arm's prefix at it, and only then")
    tail = alpha / (m * bounds_for_confirmation(family, frozen, looks=look is not None))
    rec, fresh_w = recurrence(family, frozen, off if off_prefix is None else off_prefix, on,
                              tail if look is None else tail * look.spend, reference, predicates)
    n_off, n_rep = sum(off.values()), sum(repaired.values())
    c_off, c_rep = family.counts(off), family.counts(repaired)
    idx = np.array([family.index[e] for e in frozen], dtype=np.int64)
    l_off, u_off = cp_lower(c_off[idx], n_off, tail), cp_upper(c_off[idx], n_off, tail)
    gap = np.maximum(cp_upper(c_rep[idx], n_rep, tail) - l_off, u_off - cp_lower(c_rep[idx], n_rep, tail))
    gap_ub = float(gap.max()) if len(idx) else float("inf")
    rep_w = find_witnesses(repaired, off, reference, predicates).count
    witness_ub = float(cp_upper(rep_w, n_rep, tail))
    p_ref = None if reference is None else family.probabilities(reference)
    cal = calibrate([e.id for e in family.events], cp_lower(c_off, n_off, tail), p_ref, off_violations)
    exercised = bool(proposed_on) and bool(proposed_repaired)
    reasons = []
    if not exercised:
        reasons.append("speculation not exercised on the unrepaired or repaired arm")
    if cal.passed is not True:
        reasons.append("fresh off arm failed calibration" if cal.passed is False else "no reference law")
    if not recurs(rec, fresh_w):
        at = "" if look is None else f" (at {look})"
        reasons.append(f"no recurrence: {rec:.4f} <= {GAP_LIMIT} and no fresh witness{at}")
    if not gap_ub <= GAP_LIMIT:
        reasons.append(f"repaired gap upper bound {gap_ub:.4f} > {GAP_LIMIT}")
    if not witness_ub <= WITNESS_LIMIT:
        reasons.append(f"repaired witness-rate upper bound {witness_ub:.2e} > {WITNESS_LIMIT}")
    return RepairResult(repair_id, not reasons, rec, fresh_w, gap_ub, witness_ub, cal.passed, exercised,
                        tuple(reasons), recurrence_look=None if look is None else look.to_dict())
