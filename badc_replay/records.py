"""Channel R's bookkeeping, the same for every engine: which returned records (logprobs, scores) did not
match their documented values, by draw and by position, and the first mismatch in words."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from typing import Any

CAP = 3.0  # TRL's vllm_importance_sampling_cap, as the paper's Delta B diagnostic used it
REWARD_KEY = b"badc-delta-b-v1"  # the reward is fixed by this key: changing it changes every R(y)


def hashed_reward(outcome: str) -> float:
    """Delta B's reward R(y) in [0, 1): a fixed hash of the outcome string, unrelated to any defect."""
    digest = hashlib.blake2b(outcome.encode(), key=REWARD_KEY, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def sequence_mask_weight(log_ratio: float, cap: float = CAP) -> float:
    """TRL's sequence-level masked importance weight (`vllm_importance_sampling_mode="sequence_mask"`,
    huggingface/trl#4530) from the sum over tokens of log P_trainer - log P_engine: 0 above `cap`."""
    return 0.0 if log_ratio > math.log(cap) else math.exp(log_ratio)


def returns_with_records(trace_path: str, carries: Callable[[dict[str, Any]], bool]) -> Iterator[
        tuple[list[int], dict[str, Any]]]:
    """(prompt, return record) of every request whose return record carries records (`carries`)."""
    from badc_trace.format import read_trace

    prompt: list[int] = []
    for rec in read_trace(trace_path, allow_torn_tail=True):
        if rec["type"] == "request":
            prompt = rec["prompt"]
        elif rec["type"] == "return" and carries(rec):
            yield prompt, rec


class RecordTally:
    """Draws with records, draws with a mismatch, mismatches per output position, the first mismatch;
    and for Delta B (badc_check/delta_b.py), the sum over draws of TRL's sequence-mask importance weight
    times the hashed reward, the weight from the draw's returned log-probabilities against the
    documented (sequential) ones."""

    def __init__(self) -> None:
        self.draws = self.mismatched = 0
        self.positions: dict[int, int] = {}
        self.first: dict[str, Any] | None = None
        self._bad = False
        self.sum_wr, self.masked, self.weighted = 0.0, 0, 0
        self._outcome: str | None = None
        self._log_ratio = 0.0

    def _end_draw(self) -> None:
        if self._outcome is None:
            return
        w = sequence_mask_weight(self._log_ratio)
        self.masked += w == 0.0
        self.weighted += 1
        self.sum_wr += w * hashed_reward(self._outcome)
        self._outcome = None

    def start_draw(self, outcome: str | None) -> None:
        """A draw with records, whose returned outcome is `outcome` (None: not known, so no weight)."""
        self._end_draw()
        self.draws += 1
        self._bad = False
        self._outcome, self._log_ratio = outcome, 0.0

    def logprob(self, documented: float | None, seen: float | None) -> None:
        """The sampled token's documented log-probability and the one the engine returned (either missing:
        the draw's weight is not known)."""
        if documented is None or seen is None:
            self._outcome = None
        else:
            self._log_ratio += documented - seen

    def mismatch(self, request: int, position: int, **detail: Any) -> None:
        """A returned record at output `position` (1-based) of the current draw differs from its
        documented value; `detail` (expected, seen, ...) describes the first one."""
        self.positions[position] = self.positions.get(position, 0) + 1
        self.mismatched += not self._bad
        self._bad = True
        if self.first is None:
            self.first = {"request": request, "position": position, **detail}

    def to_dict(self) -> dict[str, Any]:
        self._end_draw()
        out = {"draws": self.draws, "mismatch": self.mismatched, "positions": self.positions,
               "first_mismatch": self.first}
        if self.weighted == self.draws:  # every draw's weight known (a draw without its outcome has none)
            out["weighted_reward"] = {"sum": self.sum_wr, "masked": self.masked}
        return out
