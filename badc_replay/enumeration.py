"""Exact laws by scripted enumeration, shared by every engine's kernel adapter and simulator.

A program whose only randomness is `choose(probs) -> token` is run again and again: each run follows
a script of choices and, where the script ends, the next `choose` stops the run with the law it was
given; every token with positive mass extends the script. The law of the program's outcomes is the
sum of the script probabilities that reach each outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class Branch(Exception):
    """Raised by `choose` where the script ends, carrying the law to branch on."""

    def __init__(self, law: np.ndarray):
        self.law = law


@dataclass(frozen=True)
class ExactLaw:
    law: dict[str, float]
    paths: int  # program runs enumerated


Choose = Callable[[np.ndarray], int]


def enumerate_law(run: Callable[[Choose], str], max_paths: int = 200_000, what: str = "") -> ExactLaw:
    """Depth-first enumeration of `run(choose) -> outcome`; `choose` must be given a law summing to one."""
    law: dict[str, float] = {}
    stack: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    paths = 0
    while stack:
        script, prob = stack.pop()
        paths += 1
        if paths > max_paths:
            raise RuntimeError(f"{what}: more than {max_paths} paths to enumerate")
        pos = [0]

        def choose(probs: np.ndarray, script: tuple[int, ...] = script, pos: list[int] = pos) -> int:
            if pos[0] >= len(script):
                raise Branch(probs)
            pos[0] += 1
            return script[pos[0] - 1]

        try:
            outcome = run(choose)
        except Branch as b:
            for y in np.flatnonzero(b.law > 0):
                stack.append((script + (int(y),), prob * float(b.law[y])))
            continue
        law[outcome] = law.get(outcome, 0.0) + prob
    return ExactLaw(law, paths)
