"""Anytime-valid early stopping for `badc run --anytime`: the error budget spent over planned looks.

The looks are fixed at the seal, at contiguous prefixes of each arm's roster: draws n/2^(K-1), ...,
n/2, n (halving while the prefix keeps at least MIN_FIRST draws), never at whichever shards happen to
finish first. Look k may use the share w_k of each config's budget, the last look 1/2 and each earlier
one 1/(2(K-1)), so every bound of every look (channels S and R, calibration, compatibility) holds
jointly with probability at least 1 - alpha by a union bound over the looks, whatever the dependence
between them. A config stops at its first look whose decision is VOID or a FAILS with eligible
evidence (each holds at that look's level; a FAILS without eligible evidence goes on, since more draws
can make it eligible); NOT_REJECTED is said only at the last look, on all n draws. The price at the planned n
is a Clopper-Pearson bound at half the tail (BENCHMARKS.md has the width ratio).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_FIRST = 1000  # draws per arm at the first look


@dataclass(frozen=True)
class Look:
    index: int  # 1..K
    of: int  # K
    draws: int  # per arm: the prefix 0 .. draws - 1 of each arm's roster
    spend: float  # share of the config's error budget this look uses

    def to_dict(self) -> dict[str, float | int]:
        return {"look": self.index, "of": self.of, "draws": self.draws, "spend": self.spend}

    def __str__(self) -> str:
        return f"look {self.index} of {self.of} ({self.draws:,} draws per arm)"


def planned_looks(n: int, min_first: int = MIN_FIRST) -> list[Look]:
    """The looks for n draws per arm, in order; a single look (fixed n) when n < 2 min_first."""
    if n <= 0:
        raise ValueError(f"draws must be positive, got {n}")
    sizes = [n]
    while sizes[-1] // 2 >= min_first:
        sizes.append(-(-sizes[-1] // 2))
    sizes.reverse()
    k = len(sizes)
    spends = [1.0] if k == 1 else [0.5 / (k - 1)] * (k - 1) + [0.5]
    return [Look(i + 1, k, size, w) for i, (size, w) in enumerate(zip(sizes, spends, strict=True))]
