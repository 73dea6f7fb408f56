"""Channel R (D4): returned logprobs and prompt logprobs against their documented values (live)."""

from __future__ import annotations

from typing import Any

from badc_replay.engines.vllm.config import RECORD_TOLERANCE
from badc_replay.engines.vllm.kernel import Kernel
from badc_replay.records import RecordTally, returns_with_records


def check_records(trace_path: str, kernel: Kernel) -> dict[str, Any]:
    """D4: each returned token's logprob against the log-softmax of the raw model logits at its logical
    prefix (vLLM's default `logprobs_mode`, raw_logprobs), from the kernel's speculation-free queries; each
    prompt token's (`prompt_logprobs`) against the same at its prompt prefix. Positions are 1-based in the
    output, prompt positions numbered after the output's (-1 for the second prompt token, -2 ...)."""
    tally = RecordTally()
    carries = ("logprobs", "prompt_logprobs")
    for prompt, rec in returns_with_records(trace_path, lambda r: any(r.get(k) is not None for k in carries)):
        tally.start_draw(rec.get("outcome"))
        tokens = rec["tokens"]
        for j, seen in enumerate(rec.get("logprobs") or ()):
            row = kernel.row(tuple(tokens[:j]))
            documented = None if row is None else float(row[tokens[j]])
            tally.logprob(documented, seen)
            if documented is None or seen is None or abs(seen - documented) > RECORD_TOLERANCE:
                tally.mismatch(rec["req"], j + 1, token=tokens[j], expected=documented, seen=seen)
        for i, seen in enumerate(rec.get("prompt_logprobs") or (), start=1):
            documented = float(kernel.prompt_logprob(tuple(prompt[:i]), prompt[i]))
            if seen is None or abs(seen - documented) > RECORD_TOLERANCE:
                tally.mismatch(rec["req"], -i, token=prompt[i], expected=documented, seen=seen)
    return tally.to_dict()
