"""Delta B (the paper's Table 3): what a confirmed defect does to an RL estimate that corrects for the
engine with TRL's sequence-mask importance weight.

Each draw y gets a fixed hashed reward R(y) in [0, 1] and TRL's `sequence_mask` weight with upper
cutoff C = 3: w = exp(sum over tokens of (log P_trainer - log P_engine)), set to 0 when above C
(`vllm_importance_sampling_mode="sequence_mask"`, huggingface/trl#4530). The engine's log-probabilities
are its returned records; an engine that returns none gives w = 1 for every draw. An arm's weighted
mean reward is (1/n) sum w R; its bias is relative to E_P[R] under the sequential law P; Delta B is the
speculative arm's weighted mean minus the speculation-off arm's (E_P[R] cancels).

The interval is distribution-free and fixed before the draws: Hoeffding's inequality for each arm's
mean of values in [0, C], two-sided at level/2 per arm, the half-widths added. With the paper's
1,000,000 draws per arm and level 0.05/3 (its three confirmed causes), the half-width is 0.0099, as
in its Table 3.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from badc_replay.records import CAP, hashed_reward

__all__ = ["CAP", "DeltaB", "WeightedRewards", "delta_b", "delta_b_line", "hashed_reward", "hoeffding_half_width",
           "unweighted"]


@dataclass(frozen=True)
class WeightedRewards:
    """One arm: its draws, the sum of w R over them, and how many draws the cutoff masked."""

    draws: int
    sum_wr: float
    masked: int = 0
    weights: str = "ones"  # "ones": no records, every w = 1; "records": w from the returned log-probabilities

    @property
    def mean(self) -> float:
        return self.sum_wr / self.draws if self.draws else float("nan")


def unweighted(outcomes: Mapping[str, int]) -> WeightedRewards:
    """An arm whose engine returned no records: every weight is one."""
    return WeightedRewards(sum(outcomes.values()), sum(k * hashed_reward(y) for y, k in outcomes.items()))


def hoeffding_half_width(n: int, level: float, cap: float = CAP) -> float:
    """Half-width of a two-sided interval for the mean of n values in [0, cap] at `level`."""
    return cap * math.sqrt(math.log(2 / level) / (2 * n))


@dataclass(frozen=True)
class DeltaB:
    on: float  # the speculative arm's weighted mean reward
    off: float
    expected: float | None  # E_P[R] under the sequential law (None without an exact law)
    delta: float  # on - off
    low: float
    high: float
    level: float
    weights: str  # "ones" or "records"
    masked: dict[str, int]

    @property
    def bias_on(self) -> float | None:
        return None if self.expected is None else self.on - self.expected

    @property
    def bias_off(self) -> float | None:
        return None if self.expected is None else self.off - self.expected

    def to_dict(self) -> dict:
        return {**asdict(self), "bias_on": self.bias_on, "bias_off": self.bias_off, "cap": CAP}


def delta_b(on: WeightedRewards, off: WeightedRewards, level: float,
            reference: Mapping[str, float] | None = None) -> DeltaB:
    """Delta B with its interval at `level` (each arm at level/2)."""
    if not (on.draws and off.draws):
        raise ValueError("Delta B needs draws in both arms")
    half = hoeffding_half_width(on.draws, level / 2) + hoeffding_half_width(off.draws, level / 2)
    expected = None if reference is None else sum(p * hashed_reward(y) for y, p in reference.items())
    d = on.mean - off.mean
    return DeltaB(on.mean, off.mean, expected, d, d - half, d + half, level,
                  "records" if "records" in (on.weights, off.weights) else "ones",
                  {"on": on.masked, "off": off.masked})


def delta_b_line(d: Mapping) -> str:
    """Delta B in words, for a report (`DeltaB.to_dict()`, or {"unavailable": why})."""
    if "unavailable" in d:
        return f"Delta B not computed: {d['unavailable']}"
    weights = ("every weight one (the engine returned no records)" if d["weights"] == "ones" else
               f"weights from the returned records ({d['masked']['on']:,} on-arm and {d['masked']['off']:,} off-arm "
               "draws masked above the cutoff)")
    bias = "" if d["expected"] is None else (f"; E_P[R] {d['expected']:.4f}, bias on {d['bias_on']:+.4f}, "
                                             f"off {d['bias_off']:+.4f}")
    return (f"Delta B (TRL sequence-mask importance weight, cutoff {d['cap']:g}, hashed reward in [0, 1], on the "
            f"confirmation arms): {d['delta']:+.4f} [{d['low']:.4f}, {d['high']:.4f}] at level {d['level']:.3g}; "
            f"{weights}{bias}; a diagnostic beside the confirmation rule, not part of it")
