"""Hypothesis compatibility: is the on-arm consistent with a supplied mechanism law mu_H?

Never enters a detection decision. H is compatible when every event's two-sided
interval for the on-arm contains mu_H(A) within 0.005 and no observed on-arm outcome has mu_H = 0. The same rule
applied to P says whether the null law is rejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from badc_check.bounds import cp_lower, cp_upper, cs_lower, cs_upper
from badc_check.events import EventFamily

ALLOWANCE = 0.005


@dataclass(frozen=True)
class Compatibility:
    id: str
    compatible: bool
    null_rejected: bool | None  # None without a reference law
    worst_event: str | None  # where mu_H is furthest outside its interval
    zero_veto: tuple[str, ...]  # observed on-arm outcomes with mu_H = 0


def _check(family: EventFamily, law: Mapping[str, float], on: Mapping[str, int], low: np.ndarray,
           high: np.ndarray) -> tuple[bool, str | None, tuple[str, ...]]:
    mu = family.probabilities(law)
    outside = np.maximum(low - ALLOWANCE - mu, mu - high - ALLOWANCE)
    i = int(np.argmax(outside))
    zeros = tuple(sorted(y for y, k in on.items() if k and law.get(y, 0.0) <= 0))
    return bool(outside[i] <= 0) and not zeros, family.events[i].id, zeros


def compatibility(hid: str, law: Mapping[str, float], family: EventFamily, on: Mapping[str, int],
                  on_counts: np.ndarray, n_on: int, tail: float,
                  reference: Mapping[str, float] | None, anytime: bool = False) -> Compatibility:
    """`tail` is each side's level of the two-sided intervals (the compatibility budget); `anytime`
    takes them from confidence sequences, valid at every look."""
    lower, upper = (cs_lower, cs_upper) if anytime else (cp_lower, cp_upper)
    low, high = lower(on_counts, n_on, tail), upper(on_counts, n_on, tail)
    ok, worst, zeros = _check(family, law, on, low, high)
    null = None if reference is None else not _check(family, reference, on, low, high)[0]
    return Compatibility(hid, ok, null, worst, zeros)
