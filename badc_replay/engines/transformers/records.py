"""Channel R: returned scores and logits against the kernel (live)."""

from __future__ import annotations

from typing import Any

import numpy as np

from badc_replay.engines.transformers.config import SCORE_TOLERANCE
from badc_replay.engines.transformers.contract import _floats, _score_diff
from badc_replay.engines.transformers.kernel import Kernel
from badc_replay.records import RecordTally, returns_with_records


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):  # a masked (-inf) score stays -inf
        return x - x.max() - np.log(np.exp(x - x.max()).sum())


def check_records(trace_path: str, kernel: Kernel) -> dict[str, Any]:
    """D4: returned `scores[j]` against the processed scores at the token's logical prefix (fresh
    processors replayed along it) and `logits[j]` against the raw model logits there."""
    tally = RecordTally()
    expected_cache: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
    for prompt, rec in returns_with_records(trace_path, lambda r: "scores" in r or "logits" in r):
        tally.start_draw(rec.get("outcome"))
        for what in ("scores", "logits"):
            for j, b in enumerate(rec.get(what) or []):
                prefix = tuple(prompt + rec["tokens"][:j])
                key = (what, prefix)
                if key not in expected_cache:
                    e = kernel.processed(prefix) if what == "scores" else kernel.logits(prefix)
                    expected_cache[key] = e.float().numpy()
                if what == "scores" and j < len(rec["tokens"]):  # the sampling law's log-probability of the token
                    tok = rec["tokens"][j]
                    tally.logprob(_log_softmax(expected_cache[key])[tok], _log_softmax(_floats(b))[tok])
                if _score_diff(expected_cache[key], _floats(b)) > SCORE_TOLERANCE:
                    tally.mismatch(rec["req"], j + 1, record=what, expected=np.round(expected_cache[key], 5).tolist(),
                                   seen=np.round(_floats(b), 5).tolist())
    return tally.to_dict()
