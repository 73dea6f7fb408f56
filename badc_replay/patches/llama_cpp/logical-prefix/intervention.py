"""Runtime intervention for the repaired arm: the change of llama.py.diff, made on one Llama instance.

`apply(llm)` makes that instance record the sampled position (as the diff's `sample()` does) and hand
each user processor the position's logical prefix `input_ids[: idx + 1]` (as the diff's `apply_func`
does). Speculation stays on and every processor is still called; nothing else changes.
"""

from __future__ import annotations

from typing import Any

REPAIR_ID = "llama_cpp/logical-prefix"


class _LogicalPrefix:
    def __init__(self, llm: Any, inner: Any):
        self.llm, self.inner = llm, inner

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        return self.inner(self.llm.input_ids[: self.llm._sample_idx + 1], scores)


def apply(llm: Any) -> None:
    from llama_cpp.llama import LogitsProcessorList

    init_sampler, sample = llm._init_sampler, llm.sample

    def _init_sampler(*args: Any, **kwargs: Any) -> Any:
        procs = kwargs.get("logits_processor")
        if procs is not None:
            kwargs["logits_processor"] = LogitsProcessorList([_LogicalPrefix(llm, p) for p in procs])
        return init_sampler(*args, **kwargs)

    def _sample(*args: Any, **kwargs: Any) -> Any:
        idx = kwargs.get("idx")
        llm._sample_idx = idx if idx is not None else llm.n_tokens - 1
        return sample(*args, **kwargs)

    llm._init_sampler = _init_sampler
    llm.sample = _sample
