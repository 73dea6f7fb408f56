"""Exact output laws of small random sequential samplers, as the kernel oracle would enumerate them."""

from __future__ import annotations

import numpy as np


def random_law(seed: int, vocab: int = 4, horizon: int = 3, eos_mass: float = 0.15) -> dict[str, float]:
    """Law of outcomes `t1 .. tk|eos` or `t1 .. tL|length` of a random Markov sampler with an EOS token."""
    rng = np.random.default_rng(seed)
    law: dict[str, float] = {}

    def walk(prefix: tuple[int, ...], mass: float) -> None:
        if len(prefix) == horizon:
            law[" ".join(map(str, prefix)) + "|length"] = mass
            return
        probs = rng.dirichlet(np.full(vocab, 2.0)) * (1 - eos_mass)
        law[" ".join(map(str, prefix)) + "|eos"] = mass * eos_mass
        for t in range(vocab):
            walk(prefix + (t,), mass * probs[t])

    walk((), 1.0)
    return law


def shifted_law(law: dict[str, float], tv: float, seed: int = 0) -> dict[str, float]:
    """A law at total-variation distance exactly `tv`: mass moved from low to high outcomes."""
    rng = np.random.default_rng(seed)
    keys = list(law)
    order = rng.permutation(len(keys))
    give, take = [keys[i] for i in order[: len(keys) // 2]], [keys[i] for i in order[len(keys) // 2:]]
    out = dict(law)
    budget = tv
    for y in take:
        d = min(out[y], budget)
        out[y] -= d
        budget -= d
        if budget <= 0:
            break
    assert budget <= 1e-15, "law too small for this shift"
    for y in give:
        out[y] += tv / len(give)
    return out


def sample(law: dict[str, float], n: int, rng: np.random.Generator) -> dict[str, int]:
    keys = list(law)
    p = np.array([law[k] for k in keys])
    counts = rng.multinomial(n, p / p.sum())
    return {k: int(c) for k, c in zip(keys, counts, strict=True) if c}
