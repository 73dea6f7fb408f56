"""Runtime intervention for the repaired arm: the change of logits_process.py.diff, made at run time.

`apply(model)` makes the two stateful built-in processors, classifier-free guidance
(`UnbatchedClassifierFreeGuidanceLogitsProcessor`) and the SynthID watermark
(`SynthIDTextWatermarkLogitsProcessor`), rebuild their state at every call: reset to the state they
were created with, replay the prefix they are given from the prompt on (placeholder zero scores:
their state updates ignore scores), then make the call with the supplied scores. A mechanism
intervention, not a deployment fix: speculation stays on, every call is still made, and the state no
longer carries updates from candidate filtering or from verification rows that were rejected.
Returns a function that undoes the patch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

REPAIR_ID = "transformers/stateful-replay"


def _reset_cfg(proc: Any) -> None:
    proc.unconditional_context = copy.copy(proc._badc_initial)


def _reset_synthid(proc: Any) -> None:
    proc.state = None


def _replaying(original: Callable, reset: Callable[[Any], None], snapshot: Callable[[Any], Any]) -> Callable:
    def __call__(self: Any, input_ids: Any, scores: Any) -> Any:
        import torch

        if "_badc_prompt_length" not in self.__dict__:
            self._badc_prompt_length = int(input_ids.shape[-1])  # the first call is at the prompt
            self._badc_initial = snapshot(self)
        reset(self)
        zeros = torch.zeros_like(scores)
        for t in range(self._badc_prompt_length, int(input_ids.shape[-1])):
            original(self, input_ids[:, :t], zeros)
        return original(self, input_ids, scores)

    return __call__


def apply(model: Any = None) -> Callable[[], None]:
    from transformers.generation import logits_process as lp

    targets = [
        (lp.UnbatchedClassifierFreeGuidanceLogitsProcessor, _reset_cfg, lambda p: copy.copy(p.unconditional_context)),
        (lp.SynthIDTextWatermarkLogitsProcessor, _reset_synthid, lambda p: None),
    ]
    saved = []
    for cls, reset, snapshot in targets:
        original = cls.__dict__["__call__"]
        saved.append((cls, original))
        cls.__call__ = _replaying(original, reset, snapshot)

    def undo() -> None:
        for cls, original in saved:
            cls.__call__ = original

    return undo
