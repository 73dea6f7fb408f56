"""Embedded tiny models, built deterministically from a seed; nothing is ever downloaded.

Weights come from numpy's PCG64 generator over a fixed parameter order, so one seed gives the same
bytes on every build of an engine. `model = "tiny"` uses the engine's default seed, chosen so that
after the default prompt every token has visible mass at the first step; `"tiny:SEED"` picks another.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from badc_trace.registry import registered

DEFAULT_PROMPT = "abcdabcdab"


class ModelSpecError(ValueError):
    pass


# An engine package brings its tiny models here: `ENGINE = "package.module"`, a module like badc's own
# engines' in this folder (DEFAULT_SEED, first_step_distribution; light: it imports no engine).
ENTRY_POINT = "badc.tiny"


def engines() -> list[str]:
    """The engines with an embedded tiny model."""
    return sorted(registered(ENTRY_POINT))


def tiny_module(engine: str) -> ModuleType:
    """The engine's embedded-model module, as its engine package declares it."""
    declared = registered(ENTRY_POINT)
    if engine not in declared:
        raise ModelSpecError(f"no embedded tiny model for engine {engine!r}; engines with one: "
                             f"{', '.join(sorted(declared))}")
    return importlib.import_module(declared[engine])


def default_seed(engine: str) -> int:
    return tiny_module(engine).DEFAULT_SEED


def parse_model_spec(engine: str, spec: str) -> int | None:
    """The seed of a tiny-model spec ("tiny", "tiny:SEED" or, where the engine's module has more than one
    vocabulary, "tiny:SEED:vN"), or None for a model path."""
    if spec == "tiny":
        return default_seed(engine)
    if spec.startswith("tiny:"):
        seed, _, vocab = spec[5:].partition(":")
        if not seed.isdigit() or int(seed) >= 2**32:
            raise ModelSpecError(f"model {spec!r}: the seed after 'tiny:' must be an integer in [0, 2**32)")
        if vocab:
            vocab_size(engine, spec)  # a clear error for a vocabulary the engine's tiny model has not
        return int(seed)
    return None


def vocab_size(engine: str, spec: str) -> int | None:
    """The vocabulary size of a tiny-model spec ("tiny:SEED:vN"; else the first of the engine module's
    VOCAB_SIZES), None for an engine whose tiny model has one vocabulary."""
    sizes = getattr(tiny_module(engine), "VOCAB_SIZES", ())
    tail = spec[5:].partition(":")[2] if spec.startswith("tiny:") else ""
    if not tail:
        return sizes[0] if sizes else None
    if not (tail.startswith("v") and tail[1:].isdigit() and int(tail[1:]) in sizes):
        offered = ", ".join(f"v{n}" for n in sizes) if sizes else "none: only 'tiny:SEED'"
        raise ModelSpecError(f"model {spec!r}: {engine}'s tiny model has no vocabulary {tail!r} (sizes: {offered})")
    return int(tail[1:])


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
