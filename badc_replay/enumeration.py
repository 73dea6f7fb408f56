"""Exact laws by scripted enumeration, shared by every engine's kernel adapter and simulator.

A program whose only randomness is `choose(probs) -> token` is run again and again: each run follows
a script of choices and, where the script ends, the next `choose` stops the run with the law it was
given; every token with positive mass extends the script. The law of the program's outcomes is the
sum of the script probabilities that reach each outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


class Branch(Exception):
    """Raised by `choose` where the script ends, carrying the law to branch on."""

    def __init__(self, law: np.ndarray):
        self.law = law


@dataclass(frozen=True)
class ExactLaw:
    law: dict[str, float]
    paths: int  # program runs enumerated
    # with keep_leaves: each complete run's script and outcome (for re-running leaves: the soundness pass)
    leaves: list[tuple[tuple[int, ...], str]] = field(default_factory=list, repr=False)


Choose = Callable[[np.ndarray], int]


class _Script:
    """A `choose` that follows a script of draws and raises Branch, with the law it is given, where the
    script ends; `used` counts the draws taken."""

    def __init__(self, script: tuple[int, ...]):
        self.script, self.used = script, 0

    def choose(self, probs: np.ndarray) -> int:
        if self.used >= len(self.script):
            raise Branch(probs)
        self.used += 1
        return self.script[self.used - 1]


def enumerate_law(run: Callable[[Choose], str], max_paths: int = 200_000, what: str = "",
                  keep_leaves: bool = False) -> ExactLaw:
    """Depth-first enumeration of `run(choose) -> outcome`; `choose` must be given a law summing to one."""
    law: dict[str, float] = {}
    leaves: list[tuple[tuple[int, ...], str]] = []
    stack: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    paths = 0
    while stack:
        script, prob = stack.pop()
        paths += 1
        if paths > max_paths:
            raise RuntimeError(f"{what}: more than {max_paths} paths to enumerate")
        try:
            outcome = run(_Script(script).choose)
        except Branch as b:
            for y in np.flatnonzero(b.law > 0):
                stack.append((script + (int(y),), prob * float(b.law[y])))
            continue
        law[outcome] = law.get(outcome, 0.0) + prob
        if keep_leaves:
            leaves.append((script, outcome))
    return ExactLaw(law, paths, leaves)


class Follow:
    """One request's `choose` in a batch of scripted requests: it follows its script and, where the script
    ends, keeps the first law it is given as `branch` and returns that law's likeliest token, so the engine
    can finish the request (whose outcome is then ignored) without an exception inside its step. `prob`
    is the product of the laws it was given at the scripted draws: the leaf's probability."""

    def __init__(self, script: tuple[int, ...]):
        self.script, self.used, self.prob = script, 0, 1.0
        self.branch: np.ndarray | None = None

    def choose(self, probs: np.ndarray) -> int:
        if self.used < len(self.script):
            self.used += 1
            self.prob *= float(probs[self.script[self.used - 1]])
            return self.script[self.used - 1]
        if self.branch is None:
            self.branch = probs
        return int(np.argmax(probs))


def enumerate_batched(run_batch: Callable[[list[tuple[int, ...]]], list[str | np.ndarray]], batch: int,
                      max_paths: int = 200_000, what: str = "", keep_leaves: bool = False) -> ExactLaw:
    """Breadth-first enumeration for an engine that runs many requests in one call and must not be
    interrupted inside it: `run_batch(scripts)` gives, for each script, its outcome or the law its run
    branched on (a `Follow`'s `branch`); each law's tokens with positive mass extend the script."""
    law: dict[str, float] = {}
    leaves: list[tuple[tuple[int, ...], str]] = []
    frontier: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    paths = 0
    while frontier:
        chunk, frontier = frontier[:batch], frontier[batch:]
        paths += len(chunk)
        if paths > max_paths:
            raise RuntimeError(f"{what}: more than {max_paths} paths to enumerate")
        for (script, prob), result in zip(chunk, run_batch([s for s, _ in chunk]), strict=True):
            if isinstance(result, str):
                law[result] = law.get(result, 0.0) + prob
                if keep_leaves:
                    leaves.append((script, result))
            else:
                frontier.extend((script + (int(y),), prob * float(result[y])) for y in np.flatnonzero(result > 0))
    return ExactLaw(law, paths, leaves)


def run_script(run: Callable[[Choose], str], script: tuple[int, ...]) -> str | None:
    """The outcome of one run following `script` exactly; None when the run asks for a draw past its end
    (a run that took another course than the one the script was enumerated on)."""
    follow = _Script(script)
    try:
        outcome = run(follow.choose)
    except Branch:
        return None
    return outcome if follow.used == len(script) else None


@dataclass(frozen=True)
class SimulatorCheck:
    """How far the hypothesis simulator with the contract's reads is from P, under a named metric."""

    metric: str  # e.g. "max abs difference" or "TV distance"
    value: float
