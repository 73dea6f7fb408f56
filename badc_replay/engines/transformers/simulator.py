"""Executable hypotheses: a simulator of assisted decoding with prompt lookup (live)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from badc_replay.engines.transformers.config import NEG_INF_FLOOR, TransformersConfig, _version
from badc_replay.engines.transformers.kernel import Kernel
from badc_replay.enumeration import Branch, Choose, ExactLaw, enumerate_law
from badc_trace.outcomes import format_outcome


def _masked(x: float) -> bool:
    return not np.isfinite(x) or x <= NEG_INF_FLOOR


class AssistedSimulator:
    """Assisted decoding's call schedule with prompt lookup (generation/utils.py `_assisted_decoding`,
    candidate_generator.py `PromptLookupCandidateGenerator.get_candidates`), on the kernel's logits
    and the engine's processor and stopping factories."""

    def __init__(self, kernel: Kernel, processors: str = "persistent", stopping: str = "block"):
        if processors not in ("persistent", "fresh") or stopping not in ("block", "sequential"):
            raise ValueError("processors: persistent|fresh; stopping: block|sequential")
        if kernel.cfg.drafter.get("method") != "prompt_lookup":
            raise ValueError(f"config {kernel.cfg.id}: the simulator models prompt lookup only; the draft-model path "
                             "is outside Lemma 1 (its hypothesis law only defines events)")
        self.k, self.processors, self.stopping = kernel, processors, stopping
        d = kernel.cfg.drafter
        self.num_tokens, self.ngram = int(d.get("num_tokens", 3)), int(d.get("max_ngram_size", 2))
        self.max_length = len(kernel.prompt) + kernel.cfg.max_new_tokens
        self.eos = kernel.h.eos
        # 5.17 (and earlier) also evaluates stopping on the candidate and drops the bonus token when the
        # candidate is done and fully accepted; later releases crop at EOS instead.
        self.done_candidate_rule = _version() < (5, 18)

    def _lookup(self, ids: list[int], filt: Callable[[list[int], Any], Any]) -> list[int]:
        import torch

        n_in = len(ids)
        if self.max_length == n_in + 1:
            return []
        for n in range(min(self.ngram, n_in - 1), 0, -1):
            gram = ids[-n:]
            for idx in range(n_in - n + 1):
                if ids[idx: idx + n] != gram:
                    continue
                start = idx + n
                end = min(start + self.num_tokens, n_in, self.max_length)
                if start >= end:
                    continue
                chosen = ids[start:end]
                seq = ids
                # One placeholder tensor per match, as in get_candidates: a processor that masks in
                # place (xgrammar) carries its mask into the next filtering call.
                placeholder = torch.ones((1, self.k.model.config.vocab_size))
                for ci, tok in enumerate(list(chosen)):
                    if _masked(float(filt(seq, placeholder)[tok])):
                        chosen = chosen[:ci]
                        break
                    seq = ids + chosen[: ci + 1]
                if not chosen:
                    continue
                cut = next((i for i, t in enumerate(chosen) if t in self.eos), None)
                return chosen if cut is None else chosen[:cut]
        return []

    def run(self, choose: Choose) -> str:
        import torch

        from badc_trace.engines.transformers import outcome_of

        k = self.k
        ids = list(k.prompt)
        procs, stops = k.fresh()
        persistent = self.processors == "persistent"

        def filt(seq: list[int], placeholder: Any) -> Any:
            if persistent:
                return procs(torch.tensor([seq]), placeholder)[0]
            return k.processed(seq, placeholder[0])

        def stop(seq: list[int]) -> bool:
            return bool(stops(torch.tensor([seq]), None)[0])

        with torch.no_grad():
            while True:
                cand = self._lookup(ids, filt)
                done_candidate = self.done_candidate_rule and stop(ids + cand)
                rows = []
                for i in range(len(cand) + 1):  # every row is processed before any is sampled
                    prefix = ids + cand[:i]
                    s = (procs(torch.tensor([prefix]), k.logits(prefix).reshape(1, -1))[0] if persistent
                         else k.processed(prefix))
                    row = torch.softmax(s.float(), -1).double().numpy()
                    rows.append(row / row.sum())
                block: list[int] = []
                for i, row in enumerate(rows):
                    y = choose(row)
                    block.append(y)
                    if i == len(cand) or y != cand[i]:
                        break
                if done_candidate and len(block) == len(cand) + 1:
                    block = block[:-1]
                block = block[: self.max_length - len(ids)]
                if self.stopping == "sequential":
                    for j in range(len(block)):
                        if stop(ids + block[: j + 1]):
                            block = block[: j + 1]
                            break
                ids = ids + block
                if stop(ids):
                    return outcome_of(ids[len(k.prompt):], self.eos, k.cfg.max_new_tokens)

    def run_or_crash(self, choose: Choose) -> str:
        try:
            return self.run(choose)
        except Branch:
            raise
        except Exception as e:  # e.g. xgrammar's matcher asserting on a token it was fed twice
            return format_outcome([], f"crash:{type(e).__name__}")

    def exact_law(self) -> ExactLaw:
        return enumerate_law(self.run_or_crash, what=f"config {self.k.cfg.id} (simulator)")


class ConfigLaws:
    """The laws of one config, computed one after another by one worker (P, each hypothesis's, the
    simulator check's), on one Kernel: they share its logits, processor replays and stop map, and a
    simulator setting shared by several hypotheses (H-D2-cfg, -synthid and -xgr are one mechanism) is
    enumerated once."""

    def __init__(self, cfg: TransformersConfig):
        self.cfg, self.kernel = cfg, Kernel(cfg)
        self._laws: dict[tuple[str, str] | None, ExactLaw] = {}

    def reference(self) -> ExactLaw:
        if None not in self._laws:
            self._laws[None] = self.kernel.exact_law()
        return self._laws[None]

    def simulated(self, processors: str, stopping: str) -> ExactLaw:
        key = (processors, stopping)
        if key not in self._laws:
            self._laws[key] = AssistedSimulator(self.kernel, processors, stopping).exact_law()
        return self._laws[key]


_held: list[ConfigLaws] = []  # the last config's: a worker computes one config's laws at a time


def laws_of(cfg: TransformersConfig) -> ConfigLaws:
    if not _held or _held[0].cfg != cfg:
        _held[:] = [ConfigLaws(cfg)]
    return _held[0]


# The hypotheses' simulator switches (the engine registers each as a law, engines/transformers/__init__.py).
SWITCHES = {
    # Stateful processors advanced by candidate filtering and by every verification row, never rolled back.
    "H-D2-cfg": {"processors": "persistent", "stopping": "block"},
    "H-D2-synthid": {"processors": "persistent", "stopping": "block"},
    "H-D2-xgr": {"processors": "persistent", "stopping": "block"},
    # Stopping evaluated on the committed ids only at the end of each verification block.
    "H-D3-stopstring": {"processors": "fresh", "stopping": "block"},
}
