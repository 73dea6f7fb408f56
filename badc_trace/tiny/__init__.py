"""Embedded tiny models, built deterministically from a seed; nothing is ever downloaded.

Weights come from numpy's PCG64 generator over a fixed parameter order, so one seed gives the same
bytes on every build of an engine. `model = "tiny"` uses the engine's default seed, chosen so that
after the default prompt every token has visible mass at the first step; `"tiny:SEED"` picks another.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PROMPT = "abcdabcdab"
DEFAULT_SEEDS = {"transformers": 7, "llama_cpp": 3, "vllm": 1}
HORIZONS = {"transformers": 3, "llama_cpp": 4, "vllm": 4}
ENGINES = tuple(DEFAULT_SEEDS)


class ModelSpecError(ValueError):
    pass


def parse_model_spec(engine: str, spec: str) -> int | None:
    """The seed of a tiny-model spec ("tiny" or "tiny:SEED"), or None for a model path."""
    if engine not in DEFAULT_SEEDS:
        raise ModelSpecError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    if spec == "tiny":
        return DEFAULT_SEEDS[engine]
    if spec.startswith("tiny:"):
        tail = spec[5:]
        if not tail.isdigit() or int(tail) >= 2**32:
            raise ModelSpecError(f"model {spec!r}: the seed after 'tiny:' must be an integer in [0, 2**32)")
        return int(tail)
    return None


def cache_dir() -> Path:
    """Where built model files go (GGUF and Hugging Face folders); BADC_CACHE overrides."""
    root = os.environ.get("BADC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "badc")
    path = Path(root) / "tiny"
    path.mkdir(parents=True, exist_ok=True)
    return path


def normal(seed: int, shape: tuple[int, ...], std: float, stream: int):
    """Gaussian weights for one parameter; `stream` keeps parameters independent of their order."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64([seed, stream]))
    return (rng.standard_normal(shape) * std).astype(np.float32)
