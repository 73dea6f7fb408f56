"""The toy engine's tiny models: a bigram table from a seed (badc_toy.engine.ToyModel)."""

from __future__ import annotations

DEFAULT_SEED = 3  # after the default prompt, every token has visible mass at the first step
VOCAB = ["0", "1", "2", "3", "4", "</s>"]


def first_step_distribution(seed: int, prompt: str) -> dict[str, float]:
    import numpy as np

    from badc_toy.engine import ToyModel

    ids = [int(c) for c in prompt if c.isdigit() and int(c) < 5] or [0]
    logits = ToyModel(seed).logits(ids)
    p = np.exp(logits - logits.max())
    return {VOCAB[i]: float(x) for i, x in enumerate(p / p.sum())}
