"""Kernel adapter: exact laws by scripted enumeration through the engine itself (live)."""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any

import numpy as np

from badc_replay.engines.llama_cpp.config import LlamaConfig
from badc_replay.engines.llama_cpp.harness import Harness, load_llama
from badc_replay.engines.llama_cpp.sampler import grammar_mask, mirror_chain
from badc_replay.enumeration import Choose, ExactLaw, enumerate_law


class LogitOracle:
    """Model logits at a logical prefix, evaluated as speculation-off decoding does: the prompt in one
    batch, then one token per step. Cached per prefix; the same floats feed every law of a config, so
    enumerations differ only where the schedule differs, not by batch-size rounding."""

    def __init__(self, harness: Harness):
        self.llm = load_llama(harness.cfg)
        self.prompt = list(harness.prompt_tokens)
        self.n_vocab = self.llm.n_vocab()
        self._cache: dict[tuple[int, ...], np.ndarray] = {}
        self._state: list[int] = []

    def __call__(self, ids: np.ndarray | list[int]) -> np.ndarray:
        key = tuple(int(t) for t in ids)
        hit = self._cache.get(key)
        if hit is not None:
            return hit.copy()
        if list(key[: len(self.prompt)]) != self.prompt:
            raise ValueError("logit oracle: prefix does not start with the prompt")
        llm = self.llm
        common = 0
        for a, b in zip(self._state, key, strict=False):
            if a != b:
                break
            common += 1
        # The logits of the key's last position must come from evaluating it: when the key is a prefix
        # of what is in the cache, step back one token and evaluate that token again.
        common = min(common, len(key) - 1)
        if common < len(self.prompt):
            llm.reset()
            llm.eval(self.prompt)
            self._state = list(self.prompt)
        else:
            llm.n_tokens = common
            llm._ctx.kv_cache_seq_rm(-1, common, -1)
            self._state = list(key[:common])
        for t in key[len(self._state):]:
            llm.eval([t])
            self._state.append(t)
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(self.n_vocab,)).astype(np.float32)
        self._cache[key] = logits
        return logits.copy()


_held: list[tuple[tuple[str, tuple[int, ...]], LogitOracle]] = []  # the last model and prompt's
# freed before the interpreter tears llama_cpp down: Llama.__del__ then finds its C functions gone
atexit.register(_held.clear)


def oracle_for(harness: Harness) -> LogitOracle:
    """The logit oracle of the harness's model and prompt, shared by the laws of a config computed one after
    another in one worker (P, each hypothesis's): logits are a function of the model and the prefix."""
    key = (str(harness.cfg.model), tuple(int(t) for t in harness.prompt_tokens))
    if not _held or _held[0][0] != key:
        _held[:] = [(key, LogitOracle(harness))]
    return _held[0][1]


class KernelAdapter:
    """Exact output laws of a configuration, enumerated through the engine itself."""

    def __init__(self, cfg: LlamaConfig, speculative: bool = False, processor_view: str = "physical",
                 postcheck_view: str = "physical"):
        if processor_view not in ("physical", "logical") or postcheck_view not in ("physical", "logical"):
            raise ValueError("views are 'physical' or 'logical'")
        self.cfg = cfg
        self.speculative = speculative
        self.processor_view = processor_view
        self.postcheck_view = postcheck_view
        self.h = Harness(cfg, speculative)
        self.params = cfg.params()
        self.oracle = oracle_for(self.h)
        self._choose: Choose | None = None
        self._accepted: list[int] = []
        self._install()

    def _install(self) -> None:
        llm, adapter = self.h.llm, self

        def sample(**kw: Any) -> int:
            idx = kw["idx"]
            # Logits at the position's logical prefix (positions <= idx hold committed tokens and
            # drafts accepted so far), from the oracle rather than the block evaluation.
            logits = adapter.oracle(llm.input_ids[: idx + 1])
            procs = kw.get("logits_processor")
            if procs:
                # As Llama._init_sampler's apply_func: every processor of the list, in order, on the
                # float32 logits, with the ids it reads (self._input_ids, or the logical prefix).
                ids = llm.input_ids[: idx + 1] if adapter.processor_view == "logical" else llm._input_ids
                for p in procs:
                    logits[:] = p(ids, logits)
            grammar = kw.get("grammar")
            allowed = None if grammar is None else grammar_mask(llm, grammar, adapter._accepted)
            tok = adapter._choose(mirror_chain(logits, adapter.params, adapter._accepted, allowed))
            adapter._accepted.append(tok)
            return tok

        llm.sample = sample

    def _logical_postcheck(self, crit: Callable) -> Callable:
        # The re-check after the loop in _create_completion reads self._input_ids; sequential decoding
        # would have evaluated the prompt and every yielded token except the last one when the caller
        # abandoned the generator (EOS, stop string, max_tokens), and all of them when a stopping
        # criterion ended it. Calls inside generate() already see the logical prefix.
        h = self.h

        def check(input_ids: np.ndarray, logits: np.ndarray) -> bool:
            if h.in_generate:
                return crit(input_ids, logits)
            n = len(h.yielded) if h.generator_returned else max(len(h.yielded) - 1, 0)
            return crit(np.asarray(h.prompt_tokens + h.yielded[:n], dtype=np.intc), logits)

        return check

    def _run(self, choose: Choose) -> str:
        self._choose = choose
        self._accepted = []
        wrap = self._logical_postcheck if self.postcheck_view == "logical" else None
        return self.h.call(seed=0, wrap_stop=wrap)

    def exact_law(self, max_paths: int = 200_000) -> ExactLaw:
        return enumerate_law(self._run, max_paths, what=f"config {self.cfg.id}")
