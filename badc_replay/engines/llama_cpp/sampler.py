"""The C sampler chain, mirrored in numpy (vendor/llama.cpp/src/llama-sampler.cpp in llama-cpp-python 0.3.36)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

RECORD_TOLERANCE = 1e-4  # |returned logprob - documented logprob|; batch vs step evaluation differs ~1e-6
CREATE_COMPLETION_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "typical_p": 1.0,
                              "repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
PENALTY_LAST_N = 64  # Llama.last_n_tokens_size default


def grammar_mask(llm: Any, grammar: Any, accepted: list[int]) -> np.ndarray:
    """Tokens the grammar allows after `accepted`, from llama.cpp's own grammar sampler
    (llama_sampler_grammar_apply, llama-sampler.cpp:2680), fresh and replayed along the prefix."""
    import ctypes

    import llama_cpp

    n = llm.n_vocab()
    gs = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, grammar._grammar.encode(), grammar._root.encode())
    try:
        for t in accepted:
            llama_cpp.llama_sampler_accept(gs, t)
        data = (llama_cpp.llama_token_data * n)()
        for i in range(n):
            data[i].id, data[i].logit, data[i].p = i, 0.0, 0.0
        arr = llama_cpp.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(gs, ctypes.byref(arr))
        allowed = np.ones(n, dtype=bool)
        for i in range(arr.size):
            if not np.isfinite(data[i].logit):
                allowed[data[i].id] = False
        return allowed
    finally:
        llama_cpp.llama_sampler_free(gs)


def mirror_chain(logits: np.ndarray, params: Mapping[str, float], accepted: list[int],
                 allowed: np.ndarray | None = None) -> np.ndarray:
    """The law `dist` samples from, after Llama._init_sampler's chain (llama.py 0.3.36, _init_sampler):
    custom processors (applied by the caller) -> penalties -> grammar (`allowed`) -> top_k -> typical
    -> top_p -> min_p -> temp -> dist."""
    x = logits.astype(np.float32).copy()
    keep = np.ones(len(x), dtype=bool)
    rep, freq, pres = params["repeat_penalty"], params["frequency_penalty"], params["presence_penalty"]
    # llama_sampler_penalties_apply (llama-sampler.cpp:2950): is_disabled() when all neutral; counts
    # over the last penalty_last_n *accepted* (sampled) tokens -- prompt tokens are never accepted.
    if rep != 1.0 or freq != 0.0 or pres != 0.0:
        window = accepted[-PENALTY_LAST_N:]
        for tok in set(window):
            count = window.count(tok)
            x[tok] = x[tok] * np.float32(rep) if x[tok] <= 0 else x[tok] / np.float32(rep)
            x[tok] -= np.float32(count * freq + (count > 0) * pres)
    if allowed is not None:
        x[~allowed] = -np.inf
    temp = params["temperature"]
    if temp < 0:  # _init_sampler: dist only
        return _softmax(x, keep)
    if temp == 0:  # greedy
        out = np.zeros(len(x))
        out[int(np.argmax(x))] = 1.0
        return out
    keep &= np.isfinite(x) | (x > 0)
    # llama_sampler_top_k_impl (:321): k <= 0 disables; keeps the k largest logits.
    k = int(params["top_k"])
    if 0 < k < keep.sum():
        order = np.argsort(-np.where(keep, x, -np.inf), kind="stable")
        keep[order[k:]] = False
    if params["typical_p"] < 1.0:
        raise NotImplementedError("llama_cpp mirror: typical_p < 1 is not mirrored")
    # llama_sampler_top_p_apply (:1549): softmax over the current candidates (float32), sorted
    # descending, keep the shortest prefix whose cumulative probability reaches p (min_keep 1).
    top_p = params["top_p"]
    if top_p < 1.0:
        p = _softmax(x, keep).astype(np.float32)
        order = [i for i in np.argsort(-np.where(keep, x, -np.inf), kind="stable") if keep[i]]
        cum = np.float32(0)
        last = len(order)
        for j, i in enumerate(order):
            cum = np.float32(cum + p[i])
            if cum >= np.float32(top_p):
                last = j + 1
                break
        for i in order[last:]:
            keep[i] = False
    # llama_sampler_min_p_apply (:1749): keep logit >= max_logit + logf(p).
    min_p = params["min_p"]
    if min_p > 0:
        max_logit = np.max(x[keep])
        keep &= x >= np.float32(max_logit + np.float32(math.log(min_p)))
    # llama_sampler_temp_impl (:265): logits /= temp; llama_sampler_dist_apply (:1150): softmax.
    return _softmax(x / np.float32(temp), keep)


def _softmax(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    z = np.where(keep, x.astype(np.float64), -np.inf)
    z = np.exp(z - z[keep].max())
    return z / z.sum()
