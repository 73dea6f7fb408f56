"""Executable hypotheses: a model of ngram verification as vLLM 0.32 runs it (live)."""

from __future__ import annotations

import numpy as np

from badc_replay.engines.vllm.kernel import Kernel
from badc_replay.enumeration import Choose, ExactLaw, enumerate_law
from badc_trace.outcomes import format_outcome


class NgramSimulator:
    """A model of ngram verification (module docstring); `bonus_mask` says how the bonus row decides
    its min_tokens mask: "logical" (sequential, the contract) or "committed" (H-D1-bonus-mintokens);
    `stop_check` when stop strings are looked for: after each "token" (the contract) or once after each
    "step" (H-D3-stop-per-step: every token the step produced is returned)."""

    def __init__(self, kernel: Kernel, bonus_mask: str = "logical", stop_check: str = "token"):
        from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as propose

        d = kernel.cfg.drafter
        self.kernel, self.bonus_mask, self.per_step = kernel, bonus_mask, stop_check == "step"
        self.k = int(d.get("num_speculative_tokens", 3))
        self.min_n, self.max_n = int(d.get("prompt_lookup_min", 1)), int(d.get("prompt_lookup_max", 2))
        self._propose = propose
        self._drafts: dict[tuple[int, ...], tuple[int, ...]] = {}

    def drafts(self, out: tuple[int, ...]) -> tuple[int, ...]:
        if out not in self._drafts:
            ctx = np.array(self.kernel.prompt + out, dtype=np.int32)
            self._drafts[out] = tuple(int(t) for t in self._propose(ctx, self.min_n, self.max_n, 1 << 20, self.k))
        return self._drafts[out]

    def run(self, choose: Choose) -> str:
        kern, m = self.kernel, self.kernel.cfg.min_tokens
        out: tuple[int, ...] = (choose(kern.law_at((), 0 < m)),)  # prefill: no drafts yet
        code = self._after_step(out, 0, kern.ended(out, not self.per_step))
        while code is None:
            c, drafts = len(out), self.drafts(out)
            for j, d in enumerate(drafts):
                y = choose(kern.law_at(out, c + j < m))
                out += (y,)
                if (code := kern.ended(out, not self.per_step)) is not None or y != d:
                    break
            else:
                pos = c if self.bonus_mask == "committed" else c + len(drafts)
                out += (choose(kern.law_at(out, pos < m)),)
                code = kern.ended(out, not self.per_step)
            code = self._after_step(out, c, code)
        return format_outcome(out, code)

    def _after_step(self, out: tuple[int, ...], start: int, code: str | None) -> str | None:
        """With stop strings checked once per step: a stop string completed by any token the step
        produced (from output position `start` on) ends the request with all of them."""
        if self.per_step and any(self.kernel.completes_stop_string(out[:i + 1]) for i in range(start, len(out))):
            return "stop"
        return code

    def law(self) -> ExactLaw:
        return enumerate_law(self.run, what=f"{self.kernel.cfg.id} ngram simulator ({self.bonus_mask})")


# The hypotheses' simulator switches (the engine registers each as a law, engines/vllm/__init__.py).
SWITCHES = {"H-D1-bonus-mintokens": {"bonus_mask": "committed"},
              "H-D3-stop-per-step": {"stop_check": "step"}}
