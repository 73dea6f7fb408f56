"""The exact channel for llama-cpp-python: mu of prompt-lookup decoding, enumerated through the live engine
(live).

`create_completion` runs as a user calls it: the engine evaluates each block of drafts itself, calls the
processors from its own sampler chain (with the ids it passes them), crops its cache, checks its stopping
criteria. Only the final draw is scripted: a custom sampler added after `dist` at the end of the engine's
own C chain reads the candidates the chain left (after processors, penalties, grammar, truncation and
temperature) and sets `selected` to the scripted token, so the chain's `accept` (grammar, penalties) sees
it too. Every draw of prompt-lookup decoding is sampled one position at a time and used, so nothing is
pruned. ctypes swallows an exception raised in that callback: the branch is recorded there and raised
after `llama_sampler_sample` returns, with `selected` left on the most likely candidate meanwhile (a
token the grammar allows).

Prompt lookup is the only drafter badc's llama-cpp-python configs offer. Mirostat, whose state updates
from the token it drew rather than a scripted one, could not be scripted this way; the configs do not
offer it either. Greedy decoding (temperature 0) draws nothing: one path.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from badc_replay.engines.llama_cpp.config import LlamaConfig
from badc_replay.engines.llama_cpp.harness import Harness
from badc_replay.enumeration import Branch, Choose, enumerate_law
from badc_replay.exact import SpeculativeLaw

# The one computation the script makes itself: the law `dist` draws from (its selection is replaced).
MIRRORED = ("llama_sampler_dist's softmax over the candidates the chain left, computed in float64 from their "
            "logits")


def speculative_law(cfg: LlamaConfig, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
    params = cfg.params()
    import llama_cpp

    from badc_replay.repairs import load_intervention

    h = Harness(cfg, speculative=True)
    undos = [load_intervention(rid).apply(h.repair_target) for rid in patches]
    llm = h.llm
    n_vocab = llm.n_vocab()
    state: dict[str, Any] = {"choose": None, "pending": None}
    proposed = [0]
    greedy = params["temperature"] == 0.0

    def scripted(cur_p: Any) -> None:
        arr = cur_p.contents
        n = int(arr.size)
        data = ctypes.cast(arr.data, ctypes.POINTER(llama_cpp.llama_token_data * n)).contents
        ids = np.fromiter((d.id for d in data), dtype=np.int64, count=n)
        logits = np.fromiter((d.logit for d in data), dtype=np.float64, count=n)
        finite = np.isfinite(logits)
        p = np.where(finite, np.exp(np.where(finite, logits - logits[finite].max(), 0.0)), 0.0)
        p /= p.sum()  # the distribution `dist` draws from: softmax of the candidates the chain left
        law = np.zeros(n_vocab)
        np.add.at(law, ids, p)
        try:
            token = state["choose"](law)
        except Branch as b:
            state["pending"] = b
            arr.selected = int(np.argmax(np.where(finite, logits, -np.inf)))
            return
        arr.selected = int(np.flatnonzero(ids == token)[0])

    # bound: a frozen repair may have wrapped them on this instance already
    init_sampler, sample = llm._init_sampler, llm.sample

    def _init_sampler(*a: Any, **k: Any) -> Any:
        sampler = init_sampler(*a, **k)
        if not greedy:
            sampler.add_custom(scripted)
        return sampler

    def scripted_sample(*a: Any, **k: Any) -> int:
        token = sample(*a, **k)
        pending, state["pending"] = state["pending"], None
        if pending is not None:
            raise pending
        return token

    drafter = llm.draft_model

    class Counting:
        """The engine's own drafter, its proposals counted (UNEXERCISED when none on any path)."""

        def __call__(self, input_ids: Any, *a: Any, **k: Any) -> Any:
            out = drafter(input_ids, *a, **k)
            proposed[0] += len(out)
            return out

    llm._init_sampler, llm.sample, llm.draft_model = _init_sampler, scripted_sample, Counting()

    def run(choose: Choose) -> str:
        state["choose"], state["pending"] = choose, None
        return h.call(seed=0)

    try:
        law = enumerate_law(run, what=f"config {cfg.id}")
    finally:
        for undo in reversed(undos):
            if callable(undo):
                undo()
    # nothing is pruned (every draw is used), so there is no soundness pass; one line is mirrored
    return SpeculativeLaw(law.law, law.paths, proposed[0], mirrored=None if greedy else MIRRORED)


def outcome_texts(cfg: LlamaConfig, outcomes: Sequence[str]) -> dict[str, str]:
    from badc_replay.engines.llama_cpp.harness import load_llama
    from badc_trace.outcomes import parse_outcome

    llm = load_llama(cfg)
    return {y: llm.detokenize(list(parse_outcome(y).tokens)).decode(errors="replace") for y in outcomes
            if not parse_outcome(y).crash}
