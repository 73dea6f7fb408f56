"""The permutation chi-square comparator C: full outputs, no oracle, no events, no witnesses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np


@dataclass(frozen=True)
class Comparator:
    statistic: float
    p_value: float
    level: float
    rejected: bool
    permutations: int


def _chi2(on: np.ndarray, total: np.ndarray, n_on: int, n: int) -> np.ndarray:
    # Pearson chi-square of the 2 x K table with rows on/off; `on` may be a batch (R x K).
    exp_on = total * (n_on / n)
    exp_off = total - exp_on
    off = total - on
    return (((on - exp_on) ** 2) / exp_on + ((off - exp_off) ** 2) / exp_off).sum(axis=-1)


def permutation_chi2(on: Mapping[str, int], off: Mapping[str, int], *, level: float = 0.05,
                     permutations: int = 9999, seed: int = 0) -> Comparator:
    """Test equality of the two output laws at `level` (the paper uses 0.05/k for k configurations).

    Permuting arm labels keeps each outcome's total; the on-arm counts of a permutation are then a
    multivariate hypergeometric draw, which is sampled directly instead of shuffling draws.
    """
    keys = sorted(set(on) | set(off))
    a = np.array([on.get(k, 0) for k in keys], dtype=np.int64)
    total = a + np.array([off.get(k, 0) for k in keys], dtype=np.int64)
    keep = total > 0
    a, total = a[keep], total[keep]
    n_on, n = int(a.sum()), int(total.sum())
    if n_on == 0 or n_on == n or len(total) < 2:
        return Comparator(0.0, 1.0, level, False, 0)
    stat = float(_chi2(a, total, n_on, n))
    rng = np.random.default_rng(seed)
    # numpy's "marginals" costs O(K) per draw and "count" O(n): with many outcomes against few draws (a
    # campaign's tail of singletons) "count" is ten times faster; either samples the same law.
    method: Literal["count", "marginals"] = "count" if len(total) * 20 > n else "marginals"
    exceed = 0
    for start in range(0, permutations, 1000):
        size = min(1000, permutations - start)
        sims = rng.multivariate_hypergeometric(total, n_on, size=size, method=method)
        exceed += int((_chi2(sims, total, n_on, n) >= stat - 1e-9 * max(stat, 1)).sum())
    p = (exceed + 1) / (permutations + 1)
    return Comparator(stat, p, level, p <= level, permutations)


def comparator_report(on: Mapping[str, int], off: Mapping[str, int], level: float, decision: str) -> dict[str, Any]:
    """C beside badc's decision (the paper's level alpha / |configs|), and which of the two rejected."""
    c = permutation_chi2(on, off, level=level)
    badc = decision == "FAILS"
    agreement = ("both rejected" if c.rejected and badc else "neither rejected" if not (c.rejected or badc)
                 else f"only C rejected (badc: {decision})" if c.rejected else "only badc rejected (C did not)")
    return {"statistic": c.statistic, "p_value": c.p_value, "level": c.level, "rejected": c.rejected,
            "permutations": c.permutations, "agreement": agreement}
