"""Runtime intervention for the repaired arm: the change of logits_process.py.diff, made at run time.

`apply(model)` makes the two stateful built-in processors, classifier-free guidance
(`UnbatchedClassifierFreeGuidanceLogitsProcessor`) and the SynthID watermark
(`SynthIDTextWatermarkLogitsProcessor`), make every call from the state the sequential loop would have
at its prefix: the state they were created with, updated by the prefix they are given from the prompt
on (placeholder zero scores: their state updates ignore scores), then the call with the supplied
scores. A mechanism intervention, not a deployment fix: speculation stays on, every call is still made,
and the state no longer carries updates from candidate filtering or from verification rows that were
rejected.

The state after each prefix is kept (per processor object, so per generate() call) and a call starts
from a deep copy of the longest prefix of its ids already seen, not from the prompt: since the state
after a prefix is a function of the prefix alone, this is the same state the replay from the prompt
gives, at one update and one copy per call instead of one update per position. Returns a function that
undoes the patch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

REPAIR_ID = "transformers/stateful-replay"

_START = ("prompt",)  # key of the state the processor was created with (before the call at the prompt)


def _replaying(original: Callable, field: str) -> Callable:
    def __call__(self: Any, input_ids: Any, scores: Any) -> Any:
        import torch

        rows = input_ids.tolist()
        length = len(rows[0])
        if "_badc_states" not in self.__dict__:
            self._badc_prompt_length = length  # the first call is at the prompt
            self._badc_states = {_START: getattr(self, field)}
        prompt, states = self._badc_prompt_length, self._badc_states

        def key(t: int) -> tuple:  # the state after the calls at prompt .. t depends on ids[:, :t] alone
            return tuple(tuple(r[:t]) for r in rows)

        start = next((t for t in range(length - 1, prompt - 1, -1) if key(t) in states), prompt - 1)
        # The processor updates a copy: a kept state is never the live one, so the state a call leaves is
        # kept as it is (one copy per call, not two).
        setattr(self, field, copy.deepcopy(states[key(start) if start >= prompt else _START]))
        if start + 1 < length:
            zeros = torch.zeros_like(scores)
            for t in range(start + 1, length):
                original(self, input_ids[:, :t], zeros)
                states[key(t)] = copy.deepcopy(getattr(self, field))  # the next update goes on from the live one
        out = original(self, input_ids, scores)
        states[key(length)] = getattr(self, field)
        return out

    return __call__


def apply(model: Any = None) -> Callable[[], None]:
    from transformers.generation import logits_process as lp

    targets = [(lp.UnbatchedClassifierFreeGuidanceLogitsProcessor, "unconditional_context"),
               (lp.SynthIDTextWatermarkLogitsProcessor, "state")]
    saved = []
    for cls, field in targets:
        original = cls.__dict__["__call__"]
        saved.append((cls, original))
        cls.__call__ = _replaying(original, field)

    def undo() -> None:
        for cls, original in saved:
            cls.__call__ = original

    return undo
