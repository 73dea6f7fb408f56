"""Harness: one configuration on one in-process `LLM`, many draws per generate() (live)."""

from __future__ import annotations

import os
import sys
from typing import Any

from badc_replay.engines.vllm.config import VllmConfig
from badc_trace.outcomes import format_outcome


def load_llm(cfg: VllmConfig, speculative: bool, **kwargs: Any) -> Any:
    """An in-process `LLM` on the config's model (the embedded tiny model, or a model folder)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the probes need the runner in-process
    ffi = sys.modules.get("llvmlite.binding.ffi")
    if ffi is not None:
        # vLLM 0.32's CPU platform rebinds its kernel overrides at every engine start by scanning every
        # loaded module's globals and reading `vars(value).get("kernel")`; llvmlite's `ffi.lib` (loaded
        # by numba with the first ngram engine) answers `__dict__` with a wrapped C function, so a second
        # LLM in a process fails with "'_lib_fn_wrapper' object has no attribute 'get'". Its function
        # table is the lookup `__dict__` goes through: an empty dict there makes the scan skip it.
        ffi.lib._fntab.setdefault("__dict__", {})
    from badc_trace.tiny import parse_model_spec, vocab_size
    from badc_trace.tiny import vllm as tiny

    if speculative:
        kwargs["speculative_config"] = cfg.speculative_config()
    seed = parse_model_spec("vllm", cfg.model)
    if seed is not None:
        return tiny.load(seed, vocab_size("vllm", cfg.model), **kwargs)
    # a trained checkpoint: its folder (a named one dequantized from its GGUF), a context long enough for
    # chat-length prompts
    return tiny.llm(cfg.model_path, **{"max_model_len": 1024, **kwargs})


class EngineDead(RuntimeError):
    """The in-process engine failed a batch and cannot be used again."""


class Harness:
    """Runs one configuration on one `LLM` and returns outcome strings, many draws per generate()."""

    def __init__(self, cfg: VllmConfig, speculative: bool):
        self.cfg = cfg
        # with records, channel R's kernel queries every logprob of this engine afterwards
        self.llm = self.repair_target = load_llm(cfg, speculative, **({"max_logprobs": -1} if cfg.records else {}))
        self.prompt = cfg.prompt_ids(self.llm)
        self.dead: str | None = None  # the exception that broke the engine

    def draw(self, seeds: list[int]) -> list[str]:
        """Many draws in one generate() call (`VllmEngine.batch`)."""
        if self.dead is not None:
            # vLLM 0.32's in-process engine keeps a failed step's requests scheduled: its next generate()
            # never returns (the scheduler spins), so the shard stops here, loudly, instead of hanging
            raise EngineDead(f"config {self.cfg.id}: vLLM's engine raised {self.dead} in an earlier batch and "
                             "cannot serve more requests in this process (its next generate() never returns)")
        if not self.cfg.seeded:
            import torch

            torch.manual_seed(seeds[0])  # batches start at the same draws on a resume: the same draws again
        try:
            outs = self.llm.generate([{"prompt_token_ids": self.prompt}] * len(seeds),
                                     [self.cfg.params(s if self.cfg.seeded else None) for s in seeds],
                                     use_tqdm=False)
        except Exception as e:  # a crash of the batch is a crash outcome of each of its draws
            self.dead = f"{type(e).__name__}: {str(e)[:200]}"
            return [format_outcome([], f"crash:{type(e).__name__}")] * len(seeds)
        return [format_outcome([int(t) for t in o.outputs[0].token_ids], o.outputs[0].finish_reason or "none")
                for o in outs]
