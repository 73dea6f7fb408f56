"""Score-level study of a trace (the paper's Supplement E and G): at every target-verification call,
the scores the engine produced against the sequential ones, and the history a stateful processor was
fed against the one sequential decoding would have fed it.

For each processor-list call of a request an engine reports (`Engine.score_request`, live: it runs the
engine's own processors and model):

- `history` (native): the last token of every list call the request made so far, in order: what a
  processor that appends one token per call (classifier-free guidance's unconditional model with
  its cache) was fed; `intended`: the prompt's last token, then the position's logical prefix;
- `tv_intended`: TV between the softmax of the native output and of fresh processors replayed along
  the logical prefix, on the same incoming scores (what sequential decoding gives there);
- `tv_actual`: TV between the native output and fresh processors fed the request's own calls so far
  (the actual history): near zero when that history explains the native output;
- `tv_target`: TV between the incoming target scores and the model's logits at the logical prefix
  (the target-score reference of the plain and repetition-penalty controls). An engine that does not
  call an empty processor list (transformers) records no verification call for plain sampling; where
  the request returned its logits, each returned position is a call with `tv_target` alone.

A request is exposed when its drafter proposed at least one token (every proposal is verified); an
unexposed one tests nothing, and is never counted as agreement. An exposed request is a mechanism
witness when one of its verification calls has a history mismatch and `tv_intended` > WITNESS_TV; it
agrees with the references when it has at least one checked call and every one is within AGREE_TV
(`tv_intended` and `tv_target` where measured); an exposed request with no checked call is neither. These are
scores of repeated initial states, not draws of returned outputs: the study says nothing of a
returned-output law or of how often a defect occurs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

WITNESS_TV = 1e-3  # Supplement E: a conditional-score TV above this, with a history mismatch, is a witness
AGREE_TV = 1e-4    # Supplement G: controls agree with their target-score references within this


class ScoresUnavailable(ValueError):
    """The study cannot run on this trace here: why (no scores recorded, the engine not installed...)."""


@dataclass(frozen=True)
class CallScore:
    """One processor-list call of a request."""

    record: int  # index of the record within its request
    role: str  # the engine's call role (verify, step, filter...)
    position: int  # new tokens in the logical prefix
    draft_row: bool  # a verification row past committed ids: it read drafts
    history: tuple[int, ...]
    intended: tuple[int, ...]
    tv_intended: float | None  # None where the call belongs to no position (a drafter's filtering)
    tv_actual: float
    tv_target: float | None

    @property
    def history_mismatch(self) -> bool:
        return self.tv_intended is not None and self.history != self.intended


@dataclass(frozen=True)
class RequestScores:
    request: int
    calls: tuple[CallScore, ...]
    exposed: bool  # the drafter proposed at least one token in this request

    def _checked(self) -> list[CallScore]:
        return [c for c in self.calls if c.tv_intended is not None or c.tv_target is not None]

    @property
    def mismatches(self) -> int:
        return sum(c.history_mismatch for c in self.calls)

    @property
    def max_tv_intended(self) -> float:
        return max((c.tv_intended for c in self.calls if c.tv_intended is not None), default=0.0)

    @property
    def max_tv_actual(self) -> float:
        return max((c.tv_actual for c in self.calls), default=0.0)

    @property
    def max_tv_target(self) -> float:
        return max((c.tv_target for c in self.calls if c.tv_target is not None), default=0.0)

    @property
    def witness(self) -> CallScore | None:
        """The first call with a history mismatch and a score TV above WITNESS_TV (exposed requests only)."""
        if not self.exposed:
            return None
        return next((c for c in self.calls if c.tv_intended is not None and c.history_mismatch
                     and c.tv_intended > WITNESS_TV), None)

    @property
    def agrees(self) -> bool:
        """Exposed, with at least one checked call, and every one within AGREE_TV of its references."""
        return (self.exposed and bool(self._checked()) and self.max_tv_intended <= AGREE_TV
                and self.max_tv_target <= AGREE_TV)

    def to_dict(self) -> dict[str, Any]:
        w = self.witness
        return {"request": self.request, "exposed": self.exposed, "calls": len(self.calls),
                "checked_calls": len(self._checked()),
                "history_mismatches": self.mismatches, "max_tv_intended": self.max_tv_intended,
                "max_tv_actual": self.max_tv_actual, "max_tv_target": self.max_tv_target,
                "witness": None if w is None else asdict(w), "agrees": self.agrees}


@dataclass(frozen=True)
class ScoreStudy:
    engine: str
    requests: tuple[RequestScores, ...]
    # what the study could not cover: a torn tail (requests may be lost), requests that crashed or never
    # returned (the calls after that were never made); never said to agree
    left_unchecked: tuple[str, ...] = ()

    @property
    def exposed(self) -> int:
        return sum(r.exposed for r in self.requests)

    @property
    def witnesses(self) -> int:
        return sum(r.witness is not None for r in self.requests)

    @property
    def agreeing(self) -> int:
        return sum(r.agrees for r in self.requests)

    @property
    def explained(self) -> bool:
        """Every call's native output is reproduced by its own actual call history within AGREE_TV."""
        return all(r.max_tv_actual <= AGREE_TV for r in self.requests)

    def summary(self) -> str:
        n = len(self.requests)
        return (f"{n} requests, {self.exposed} exposed (the drafter proposed a token); mechanism witnesses "
                f"(history mismatch and score TV > {WITNESS_TV:g} at a verification call): {self.witnesses} of "
                f"{self.exposed} exposed; agreeing with the sequential references within {AGREE_TV:g}: "
                f"{self.agreeing} of {self.exposed} exposed; native scores reproduced by their actual call history: "
                + ("yes" if self.explained else f"NO (max TV {max(r.max_tv_actual for r in self.requests):.3g})"))

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "witness_tv": WITNESS_TV, "agree_tv": AGREE_TV,
                "left_unchecked": list(self.left_unchecked),
                "requests": [r.to_dict() for r in self.requests], "exposed": self.exposed,
                "witnesses": self.witnesses, "agreeing": self.agreeing, "explained": self.explained}


def tv(a: np.ndarray, b: np.ndarray) -> float:
    """TV distance between the softmax of two score vectors (masked scores are -inf or the engine's floor)."""
    def p(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        x = np.where(np.isfinite(x), x, -np.inf)
        e = np.exp(x - x.max())
        return e / e.sum()
    return float(0.5 * np.abs(p(a) - p(b)).sum())
