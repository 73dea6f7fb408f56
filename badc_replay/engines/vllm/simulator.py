"""Executable hypotheses: a model of ngram verification as vLLM 0.32 runs it (live)."""

from __future__ import annotations

import numpy as np

from badc_replay.engines.vllm.kernel import Kernel
from badc_replay.enumeration import Choose, ExactLaw, enumerate_law
from badc_trace.outcomes import format_outcome


class NgramSimulator:
    """A model of ngram verification (module docstring); `bonus_mask` says how the bonus row decides
    its min_tokens mask: "logical" (sequential, the contract) or "committed" (H-D1-bonus-mintokens)."""

    def __init__(self, kernel: Kernel, bonus_mask: str):
        from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as propose

        d = kernel.cfg.drafter
        self.kernel, self.bonus_mask = kernel, bonus_mask
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
        while (code := kern.ended(out)) is None:
            c, drafts = len(out), self.drafts(out)
            for j, d in enumerate(drafts):
                y = choose(kern.law_at(out, c + j < m))
                out += (y,)
                if (code := kern.ended(out)) is not None:
                    return format_outcome(out, code)
                if y != d:
                    break
            else:
                pos = c if self.bonus_mask == "committed" else c + len(drafts)
                out += (choose(kern.law_at(out, pos < m)),)
        return format_outcome(out, code)

    def law(self) -> ExactLaw:
        return enumerate_law(self.run, what=f"{self.kernel.cfg.id} ngram simulator ({self.bonus_mask})")


HYPOTHESES = {"H-D1-bonus-mintokens": "committed"}
