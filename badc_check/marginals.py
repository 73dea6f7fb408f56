"""Complete marginal TV bounds over every union of categories (paper, Supplement D).

For a categorical observable, TV(P, Q) = max over category unions A of |P(A) - Q(A)|. Each
non-empty union is enumerated once modulo complement (2^(c-1) - 1 events for c categories); each arm
and event gets one-sided Clopper-Pearson endpoints at `tail`. For off [l0, u0] and comparison
[l1, u1], |p1 - p0| lies in [max(0, l1 - u0, l0 - u1), max(u1 - l0, u0 - l1)].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from badc_check.bounds import cp_lower, cp_upper

MAX_CATEGORIES = 20


@dataclass(frozen=True)
class MarginalTV:
    tv: float  # empirical TV
    lower: float
    upper: float
    events: int  # unions enumerated


def union_count(categories: int) -> int:
    return 2 ** (categories - 1) - 1


def marginal_tv_bounds(off: Sequence[int], other: Sequence[int], tail: float) -> MarginalTV:
    k0, k1 = np.asarray(off, dtype=np.int64), np.asarray(other, dtype=np.int64)
    if k0.shape != k1.shape or k0.ndim != 1 or not 2 <= len(k0) <= MAX_CATEGORIES:
        raise ValueError(f"need two count vectors of the same length, 2 to {MAX_CATEGORIES} categories")
    c = len(k0)
    # Unions that exclude the last category: exactly one of each complement pair, empty set dropped.
    masks = (np.arange(1, 2 ** (c - 1))[:, None] >> np.arange(c - 1)) & 1
    masks = np.hstack([masks, np.zeros((len(masks), 1), dtype=masks.dtype)])
    a0, a1 = masks @ k0, masks @ k1
    n0, n1 = int(k0.sum()), int(k1.sum())
    l0, u0 = cp_lower(a0, n0, tail), cp_upper(a0, n0, tail)
    l1, u1 = cp_lower(a1, n1, tail), cp_upper(a1, n1, tail)
    lower = np.maximum.reduce([np.zeros_like(l0), l1 - u0, l0 - u1])
    upper = np.maximum(u1 - l0, u0 - l1)
    tv = np.abs(a1 / n1 - a0 / n0)
    return MarginalTV(float(tv.max()), float(lower.max()), float(upper.max()), len(masks))
