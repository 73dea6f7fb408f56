"""Kernel: next-token logprobs from the speculation-off engine, the documented sequential semantics on top
(live)."""

from __future__ import annotations

from typing import Any

import numpy as np

from badc_replay.engines.vllm import grammar
from badc_replay.engines.vllm.config import MAX_PREFIXES, MIRRORED_SAMPLING, VllmConfig
from badc_replay.engines.vllm.harness import load_llm
from badc_replay.engines.vllm.masks import banned
from badc_replay.engines.vllm.stops import completed
from badc_replay.enumeration import Choose, ExactLaw, enumerate_law
from badc_trace.outcomes import format_outcome


def top_k_top_p(x: np.ndarray, k: int | None, p: float | None) -> np.ndarray:
    """vLLM's `apply_top_k_top_p_pytorch` on temperature-scaled logits: top-k keeps every token at or above
    the k-th largest logit (ties kept); top-p then sorts ascending and masks the tokens whose cumulative
    probability is at most 1 - p, the largest always kept."""
    x = x.copy()
    if k is not None and k < len(x):
        x[x < np.sort(x)[len(x) - k]] = -np.inf
    if p is not None:
        order = np.argsort(x, kind="stable")
        probs = np.exp(x[order] - x.max())
        cum = np.cumsum(probs / probs.sum())
        drop = cum <= 1 - p
        drop[-1] = False
        x[order[drop]] = -np.inf
    return x


class Kernel:
    """The sequential law of one configuration, from the speculation-off engine's logprobs."""

    def __init__(self, cfg: VllmConfig, llm: Any = None):
        bad = set(cfg.sampling) - MIRRORED_SAMPLING
        if bad:
            raise ValueError(f"config {cfg.id}: sampling keywords not mirrored by the vllm kernel: {sorted(bad)}")
        kinds = set(cfg.sampling.get("structured_outputs") or {}) - {"regex"}
        if kinds:
            raise ValueError(f"config {cfg.id}: structured outputs other than a regex are not mirrored by the vllm "
                             f"kernel: {sorted(kinds)}")
        self.cfg = cfg
        self.llm = llm or load_llm(cfg, speculative=False, max_logprobs=-1)
        self.vocab = len(self.llm.get_tokenizer())
        self.prompt = tuple(cfg.prompt_ids(self.llm))
        self.stops = cfg.stop_ids
        self.allowed = cfg.allowed
        self.bad_words = cfg.bad_words_ids(self.llm.get_tokenizer())
        self.stop_strings = cfg.stop_strings
        self._texts: dict[tuple[int, ...], str] = {}
        self._prompt_rows: dict[tuple[int, ...], np.ndarray] = {}
        tok = self.llm.get_tokenizer()
        self.pieces = [tok.decode([t], skip_special_tokens=True) for t in range(self.vocab)]
        self.eos = cfg.eos_id
        self.logprobs: dict[tuple[int, ...], np.ndarray] = {}  # filled as sequential decoding reaches them
        self._fill()

    def _query(self, prefixes: list[tuple[int, ...]]) -> None:
        """The raw next-token logprobs after each output prefix: one batch of one-token requests."""
        from vllm import SamplingParams

        if len(self.logprobs) + len(prefixes) > MAX_PREFIXES:
            raise RuntimeError(f"config {self.cfg.id}: more than {MAX_PREFIXES} prefixes to query")
        params = SamplingParams(max_tokens=1, temperature=1.0, logprobs=-1, seed=0)
        outs = self.llm.generate([{"prompt_token_ids": list(self.prompt + p)} for p in prefixes], params,
                                 use_tqdm=False)
        for p, o in zip(prefixes, outs, strict=True):
            row = np.full(self.vocab, -np.inf)
            for t, lp in o.outputs[0].logprobs[0].items():
                row[t] = lp.logprob
            self.logprobs[p] = row

    def _fill(self) -> None:
        """Query the output prefixes sequential decoding reaches with positive probability, one batch per
        depth (greedy decoding reaches one per depth, so it need not query the whole tree)."""
        level: list[tuple[int, ...]] = [()]
        for depth in range(self.cfg.max_new_tokens):
            self._query(level)
            if depth + 1 == self.cfg.max_new_tokens:
                break
            masked = depth < self.cfg.min_tokens
            level = [p + (int(y),) for p in level for y in np.flatnonzero(self.law_at(p, masked))
                     if self.ended(p + (int(y),)) is None]

    def row(self, out: tuple[int, ...]) -> np.ndarray | None:
        """The raw next-token logprobs after output `out`, queried now if decoding never reached it (a
        hypothesis' draft, an on-arm output); None after a stop token or at the length limit, where
        sequential decoding asks nothing."""
        if out not in self.logprobs:
            m = self.cfg.min_tokens
            if len(out) >= self.cfg.max_new_tokens or any(t in self.stops for t in out[m:]):
                return None
            self._query([out])
        return self.logprobs[out]

    def prompt_logprob(self, head: tuple[int, ...], token: int) -> float:
        """The raw model logprob of `token` after the prompt prefix `head` (a one-token request on it)."""
        if head not in self._prompt_rows:
            from vllm import SamplingParams

            out = self.llm.generate([{"prompt_token_ids": list(head)}],
                                    SamplingParams(max_tokens=1, temperature=1.0, logprobs=-1, seed=0), use_tqdm=False)
            row = np.full(self.vocab, -np.inf)
            for t, lp in out[0].outputs[0].logprobs[0].items():
                row[t] = lp.logprob
            self._prompt_rows[head] = row
        return float(self._prompt_rows[head][token])

    def law_at(self, out: tuple[int, ...], masked: bool) -> np.ndarray:
        """The processed law of the next token after output `out`, stop tokens masked or not, the tokens
        outside `allowed_token_ids` and each bad word's last token after its prefix masked (temperature 0:
        the argmax, as vLLM's greedy sampling)."""
        x = self.row(out).copy()
        x[sorted(banned(out, self.stops if masked else (), self.allowed, self.bad_words, len(x)))] = -np.inf
        if self.cfg.regex is not None:  # the grammar bitmask
            x[sorted(set(range(len(x))) - grammar.allowed(self.cfg.regex, self.text(out), self.pieces, self.eos))] = \
                -np.inf
        if self.cfg.temperature == 0:
            p = np.zeros_like(x)
            p[int(np.argmax(x))] = 1.0
            return p
        x = top_k_top_p(x / self.cfg.temperature, self.cfg.top_k, self.cfg.top_p)
        p = np.exp(x - x.max())
        return p / p.sum()

    def text(self, out: tuple[int, ...]) -> str:
        """The output text of `out`, as vLLM's detokenizer gives it (special tokens skipped)."""
        if out not in self._texts:
            self._texts[out] = self.llm.get_tokenizer().decode(list(out), skip_special_tokens=True)
        return self._texts[out]

    def completes_stop_string(self, out: tuple[int, ...]) -> bool:
        """Whether the last token of `out` completes a stop string (once more than min_tokens are out)."""
        return bool(self.stop_strings) and len(out) > self.cfg.min_tokens and \
            completed(self.text(out[:-1]), self.text(out), self.stop_strings) is not None

    def ended(self, out: tuple[int, ...], stop_strings: bool = True) -> str | None:
        """How sequential decoding ends after `out` (None: it goes on); `stop_strings=False` leaves the
        frontend's stop-string check out (the scheduler's checks only)."""
        if out and (out[-1] in self.stops or (stop_strings and self.completes_stop_string(out))):
            return "stop"
        return "length" if len(out) >= self.cfg.max_new_tokens else None

    def run(self, choose: Choose) -> str:
        out: tuple[int, ...] = ()
        while (code := self.ended(out)) is None:
            out += (choose(self.law_at(out, len(out) < self.cfg.min_tokens)),)
        return format_outcome(out, code)

    def law(self) -> ExactLaw:
        return enumerate_law(self.run, what=f"{self.cfg.id} kernel")


_kernel: list[Kernel] = []  # the last kernel: reference, hypothesis and check of a config share it


def kernel_for(cfg: VllmConfig) -> Kernel:
    if not _kernel or _kernel[0].cfg is not cfg:
        # One speculation-off engine per model and process (an LLM takes seconds and its own KV space).
        llm = _kernel[0].llm if _kernel and _kernel[0].cfg.model == cfg.model else None
        _kernel[:] = [Kernel(cfg, llm)]
    return _kernel[0]
