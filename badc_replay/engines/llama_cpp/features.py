"""Registered features: the harness processors and stopping criteria, the parity witness."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

EOS = 2
# Harness processor of the paper's LCP-1: different allowed sets at even and odd absolute positions.
PARITY_ALLOWED = {0: frozenset({3, 5, 7, 9, EOS}), 1: frozenset({4, 6, 8, EOS})}


class ParityProcessor:
    """Allows PARITY_ALLOWED[pos % 2] at absolute position pos = len(input_ids) (0-based)."""

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        allowed = PARITY_ALLOWED[len(input_ids) % 2]
        mask = np.array([i not in allowed for i in range(len(scores))])
        scores[mask] = -np.inf
        return scores


class LastIdStop:
    """Stopping criterion of LCP-3: stop when the last id seen is `token`."""

    def __init__(self, token: int):
        self.token = token

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> bool:
        return len(input_ids) > 0 and int(input_ids[-1]) == self.token


def make_processors(specs: list[Mapping[str, Any]], eos: int = EOS) -> list[Callable]:
    from llama_cpp.llama import MinTokensLogitsProcessor

    out: list[Callable] = []
    for spec in specs:
        name = spec["name"]
        if name == "parity":
            out.append(ParityProcessor())
        elif name == "min_tokens":
            out.append(MinTokensLogitsProcessor(int(spec["min_tokens"]), eos))
        else:
            raise ValueError(f"llama_cpp: unknown processor {name!r} (known: parity, min_tokens)")
    return out


def make_stopping(specs: list[Mapping[str, Any]]) -> list[Callable]:
    out: list[Callable] = []
    for spec in specs:
        if spec["name"] == "last_id":
            out.append(LastIdStop(int(spec["token"])))
        else:
            raise ValueError(f"llama_cpp: unknown stopping criterion {spec['name']!r} (known: last_id)")
    return out


def parity_violations(outcome_tokens: tuple[int, ...], prompt_len: int) -> bool:
    return any(t not in PARITY_ALLOWED[(prompt_len + j) % 2] for j, t in enumerate(outcome_tokens))
