"""Channel R (D4): returned logprobs against their documented values (live)."""

from __future__ import annotations

from typing import Any

import numpy as np

from badc_replay.engines.llama_cpp.kernel import LogitOracle
from badc_replay.engines.llama_cpp.sampler import RECORD_TOLERANCE
from badc_replay.records import RecordTally, returns_with_records


def check_records(trace_path: str, oracle: LogitOracle) -> dict[str, Any]:
    """D4: each returned `token_logprobs[j]` against its documented value, the log-softmax of the raw
    model logits at the token's logical prefix (llama.py: `Llama.logits_to_logprobs(self._scores)`)."""
    tally = RecordTally()
    for prompt, rec in returns_with_records(trace_path, lambda r: r.get("logprobs") is not None):
        tally.start_draw(rec.get("outcome"))
        tokens = rec["tokens"]
        # _create_completion leaves BOS tokens out of the logprobs lists (`if token == bos_token_id:
        # continue`); the others keep their own rows.
        returned = iter(rec["logprobs"]["token_logprobs"])
        for j, tok in enumerate(tokens):
            if tok == oracle.llm.token_bos():
                continue
            lp = next(returned, None)
            logits = oracle(prompt + tokens[:j]).astype(np.float64)
            documented = float(logits[tok] - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
            tally.logprob(documented, lp)
            if lp is None or abs(lp - documented) > RECORD_TOLERANCE:
                tally.mismatch(rec["req"], j + 1, token=tok, expected=documented, seen=lp)
    return tally.to_dict()
