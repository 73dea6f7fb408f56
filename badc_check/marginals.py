"""Complete marginal TV bounds over every union of categories (paper, Supplement D).

For a categorical observable, TV(P, Q) = max over category unions A of |P(A) - Q(A)|. Each
non-empty union is enumerated once modulo complement (2^(c-1) - 1 events for c categories); each arm
and event gets one-sided Clopper-Pearson endpoints at `tail`. For off [l0, u0] and comparison
[l1, u1], |p1 - p0| lies in [max(0, l1 - u0, l0 - u1), max(u1 - l0, u0 - l1)].
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from badc_check.bounds import cp_lower, cp_upper
from badc_trace.outcomes import parse_outcome

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


OBSERVABLES = ("first token", "visible length", "termination")


def observe(outcome: str, observable: str) -> str:
    """One outcome's category of `observable` (a crash is its own category in each)."""
    o = parse_outcome(outcome)
    if o.crash:
        return "crash"
    if observable == "first token":
        return str(o.tokens[0]) if o.tokens else "empty"
    if observable == "visible length":
        return str(len(o.tokens))
    return o.code


def categorize(arms: Sequence[Mapping[str, int]], observable: str) -> tuple[list[str], list[list[int]]]:
    """The categories of `observable` over the arms (at most MAX_CATEGORIES: the rarest are lumped into
    "other") and each arm's count vector over them."""
    per_arm: list[Counter[str]] = [Counter() for _ in arms]
    for counts, arm in zip(per_arm, arms, strict=True):
        for y, k in arm.items():
            counts[observe(y, observable)] += k
    total = sum(per_arm, Counter())
    cats = sorted(total, key=lambda c: (-total[c], c))
    if len(cats) > MAX_CATEGORIES:
        kept = set(cats[:MAX_CATEGORIES - 1])
        lumped = []
        for counts in per_arm:
            merged: Counter[str] = Counter()
            for c, k in counts.items():
                merged[c if c in kept else "other"] += k
            lumped.append(merged)
        per_arm, cats = lumped, [*cats[:MAX_CATEGORIES - 1], "other"]
    return cats, [[counts.get(c, 0) for c in cats] for counts in per_arm]


@dataclass(frozen=True)
class MarginalStudy:
    """Complete marginal TV bounds of the returned outputs (Supplement D) for one config: per observable,
    per comparison against the off arm, one simultaneous construction (tail alpha / (2 x arms x K))."""

    alpha: float
    tail: float
    events: int  # K: unions over every observable
    bounds: dict[str, dict[str, MarginalTV]]  # observable -> comparison ("on/off", "repaired/off") -> bounds
    categories: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "tail": self.tail, "events": self.events, "categories": self.categories,
                "bounds": {obs: {cmp: {"tv": b.tv, "lower": b.lower, "upper": b.upper} for cmp, b in row.items()}
                           for obs, row in self.bounds.items()}}


def marginal_study(off: Mapping[str, int], others: Mapping[str, Mapping[str, int]], alpha: float) -> MarginalStudy:
    """`others`: comparison name -> arm counts (the on arm, and the repaired arm where one ran), each
    against `off`, over first token, visible length and termination, at nominal simultaneous 1 - alpha."""
    names = list(others)
    split = {obs: categorize([off, *others.values()], obs) for obs in OBSERVABLES}
    k = sum(union_count(len(cats)) for cats, _ in split.values() if len(cats) >= 2)
    tail = alpha / (2 * (1 + len(names)) * max(k, 1))
    bounds: dict[str, dict[str, MarginalTV]] = {}
    for obs, (cats, vectors) in split.items():
        row = {}
        for name, vec in zip(names, vectors[1:], strict=True):
            row[name] = marginal_tv_bounds(vectors[0], vec, tail) if len(cats) >= 2 else MarginalTV(0.0, 0.0, 0.0, 0)
        bounds[obs] = row
    return MarginalStudy(alpha, tail, k, bounds, {obs: len(cats) for obs, (cats, _) in split.items()})
