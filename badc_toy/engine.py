"""The toy engine: a seeded bigram model, processors, stopping, prompt lookup and sample-and-match
verification (see the package docstring for the plantable defects).

All randomness goes through one `sample(probs) -> token` function per request, so the engine itself
enumerates its exact law (badc_replay.enumeration): speculation off gives P, speculation on with a
defect gives that defect's law.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

VOCAB = 6  # tokens 0-4 and EOS
EOS = 5
DEFECTS = ("D1", "D2", "D3", "D4", "R1")  # R1: the sampler's randomness (rng_sampler), not the engine's reads
Sample = Callable[[np.ndarray], int]


class ToyModel:
    """Bigram logits from a seed (PCG64): the next token's logits depend on the last token only."""

    def __init__(self, seed: int):
        rng = np.random.Generator(np.random.PCG64([seed, 20261201]))
        self.seed = seed
        self.table = rng.standard_normal((VOCAB + 1, VOCAB)) * 1.2  # the last row: after an empty prefix

    def logits(self, ids: list[int]) -> np.ndarray:
        return self.table[ids[-1] if ids else VOCAB].copy()


def log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x[np.isfinite(x)].max()
    return z - np.log(np.exp(z).sum())


# -- processors and stopping -------------------------------------------------------------------------


class MinTokens:
    """Masks EOS while fewer than `min_tokens` tokens follow the prompt (reads len(ids))."""

    name, stateful = "min_tokens", False

    def __init__(self, prompt_len: int, min_tokens: int):
        self.prompt_len, self.min_tokens = prompt_len, min_tokens

    def __call__(self, ids: list[int], scores: np.ndarray) -> np.ndarray:
        if len(ids) - self.prompt_len < self.min_tokens:
            scores = scores.copy()
            scores[EOS] = -np.inf
        return scores

    def state(self) -> None:
        return None


class Ban:
    """Masks fixed tokens (stateless, position-free)."""

    name, stateful = "ban", False

    def __init__(self, prompt_len: int, tokens: list[int]):
        self.tokens = list(tokens)

    def __call__(self, ids: list[int], scores: np.ndarray) -> np.ndarray:
        scores = scores.copy()
        scores[self.tokens] = -np.inf
        return scores

    def state(self) -> None:
        return None


class NoRepeat:
    """Stateful: remembers the newest id of every call and masks the tokens it has seen (never EOS).
    Called once per position, as sequential decoding does, its state is the set of generated tokens."""

    name, stateful = "no_repeat", True

    def __init__(self, prompt_len: int):
        self.prompt_len, self.seen = prompt_len, set()

    def __call__(self, ids: list[int], scores: np.ndarray) -> np.ndarray:
        if len(ids) > self.prompt_len:
            self.seen.add(ids[-1])
        scores = scores.copy()
        scores[[t for t in self.seen if t != EOS]] = -np.inf
        return scores

    def state(self) -> list[int]:
        return sorted(self.seen)


PROCESSORS = {"min_tokens": MinTokens, "ban": Ban, "no_repeat": NoRepeat}


def make_processor(spec: dict[str, Any], prompt_len: int) -> Any:
    kwargs = {k: v for k, v in spec.items() if k != "name"}
    return PROCESSORS[spec["name"]](prompt_len, **kwargs)


def make_stop(spec: dict[str, Any]) -> Callable[[list[int]], bool]:
    """`last_id`: stop once the last committed id is `token` (it is returned)."""
    token = int(spec["token"])
    return lambda ids: bool(ids) and ids[-1] == token


# -- the engine --------------------------------------------------------------------------------------


class ToyEngine:
    """`generate()` returns (tokens, finish reason, logprobs); finish is eos, stop or length."""

    def __init__(self, model: ToyModel, *, speculative: bool = False, num_tokens: int = 3, max_ngram_size: int = 2,
                 processors: Sequence[Mapping[str, Any]] | None = None,
                 stopping: Sequence[Mapping[str, Any]] | None = None,
                 defects: tuple[str, ...] = ()):
        unknown = set(defects) - set(DEFECTS)
        if unknown:
            raise ValueError(f"unknown defects {sorted(unknown)} (known: {', '.join(DEFECTS)})")
        self.model, self.speculative = model, speculative
        self.num_tokens, self.max_ngram_size = num_tokens, max_ngram_size
        self.processor_specs, self.stop_specs = list(processors or []), list(stopping or [])
        self.defects = frozenset(defects)

    # The methods below are the calls the probes record (badc_toy/probe.py).

    def _propose(self, ids: list[int]) -> list[int]:
        """Prompt lookup: the tokens after the latest earlier match of the longest trailing n-gram."""
        for n in range(min(self.max_ngram_size, len(ids) - 1), 0, -1):
            tail = ids[-n:]
            for start in range(len(ids) - n - 1, -1, -1):
                if ids[start:start + n] == tail:
                    return ids[start + n:start + n + self.num_tokens]
        return []

    def _call_processor(self, index: int, proc: Any, ids: list[int], logical_len: int,
                        scores: np.ndarray) -> np.ndarray:
        return proc(ids, scores)

    def _check_stop(self, ids: list[int], where: str) -> bool:
        return any(make_stop(s)(ids) for s in self.stop_specs)

    def _verified(self, drafts: list[int], accepted: int) -> None:
        """A verification block ended with `accepted` of its drafts accepted."""

    # -- one row's law --------------------------------------------------------------------------------

    def _row(self, request: _Request, view: list[int], logical_len: int) -> np.ndarray:
        """The processed scores of the row whose logical prefix is view[:logical_len]; processors see
        `view` (the logical prefix, or the whole buffer under D1)."""
        scores = self.model.logits(view[:logical_len])
        for j, spec in enumerate(self.processor_specs):
            if request.persistent is not None:  # D2: one object per request, never rolled back
                proc = request.persistent[j]
            else:  # a fresh object replayed along the row's prefix, as sequential decoding leaves it
                proc = make_processor(spec, request.prompt_len)
                if proc.stateful:
                    for end in range(request.prompt_len + 1, len(view)):
                        proc(view[:end], scores)
            scores = self._call_processor(j, proc, view, logical_len, scores)
        return scores

    def generate(self, prompt: list[int], max_new_tokens: int, sample: Sample) -> tuple[list[int], str, list[float]]:
        request = _Request(self, list(prompt))
        ids, out, logprobs = list(prompt), [], []

        def commit(t: int, row_logits: np.ndarray) -> str | None:
            """Append t; the finish reason if sequential decoding stops here."""
            if t == EOS:
                return "eos"
            ids.append(t)
            out.append(t)
            logprobs.append(float(log_softmax(row_logits)[t]))
            if "D3" not in self.defects or not self.speculative:
                if self._check_stop(ids, "committed"):
                    return "stop"
            return "length" if len(out) >= max_new_tokens else None

        while True:
            drafts = self._propose(ids)[: max(max_new_tokens - len(out) - 1, 0)] if self.speculative else []
            buffer = ids + drafts
            # One verification pass: every row's processed scores first (row i's logical prefix is the
            # committed ids and drafts before it), then sampling row by row while drafts are accepted.
            rows = [self._row(request, buffer if "D1" in self.defects else buffer[:len(ids) + i], len(ids) + i)
                    for i in range(len(drafts) + 1)]
            finish = None
            accepted_n = 0
            for i, scores in enumerate(rows):
                t = sample(_softmax(scores))
                accepted = i < len(drafts) and t == drafts[i]
                raw = self.model.logits(buffer if "D4" in self.defects and accepted else ids)
                finish = commit(t, raw)
                accepted_n += accepted
                if finish is not None or not accepted:
                    break
            if drafts:
                self._verified(drafts, accepted_n)
            if finish is None and self.speculative and "D3" in self.defects and self._check_stop(ids, "block"):
                finish = "stop"
            if finish is not None:
                return out, finish, logprobs


def _softmax(scores: np.ndarray) -> np.ndarray:
    keep = np.isfinite(scores)
    z = np.where(keep, scores - scores[keep].max(), -np.inf)
    p = np.exp(z)
    return p / p.sum()


class _Request:
    def __init__(self, engine: ToyEngine, prompt: list[int]):
        self.prompt_len = len(prompt)
        self.persistent = ([make_processor(s, len(prompt)) for s in engine.processor_specs]
                           if "D2" in engine.defects and engine.speculative else None)


def rng_sampler(seed: int, stale: bool = False) -> Sample:
    """Inverse-CDF sampling from one seeded stream: what a user's `generate(..., seed=)` does. `stale` plants
    the randomness defect R1: every uniform is used for two draws in a row, so the draws are not independent
    (the engine's reads and distributions are untouched: only its sampling kernel departs)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    held: list[float] = []

    def sample(probs: np.ndarray) -> int:
        if held:
            u = held.pop()
        else:
            u = rng.random()
            if stale:
                held.append(u)
        return int(min(np.searchsorted(np.cumsum(probs), u, side="right"), len(probs) - 1))

    return sample
