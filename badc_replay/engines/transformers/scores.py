"""The score-level study of one request (badc_replay/scores.py) with transformers' own processors (live)."""

from __future__ import annotations

from typing import Any

import numpy as np

from badc_replay.scores import CallScore, RequestScores, ScoresUnavailable, tv
from badc_trace.portable import NotPortable

NO_SCORES = ("the trace has no scores (recorded at level calls): trace with `badc-trace --level full` for the "
             "score-level study")


def _scores(b: bytes) -> Any:
    import torch

    return torch.from_numpy(np.frombuffer(b, dtype=np.float32).copy())


def score_request(request: int, records: list[dict[str, Any]], context: Any) -> RequestScores:
    """Every call of the request's processor list (a draft model's own list excluded), in order: the
    native output against fresh processors along the logical prefix (intended) and along the calls the
    request actually made (actual), and the incoming target scores against the model at the prefix;
    then each returned position's logits (`output_logits`) against the model there. Exposed: the
    prompt-lookup drafter or a draft model proposed a token."""
    import torch

    req = next((r for r in records if r["type"] == "request"), None)
    if req is None:
        raise ScoresUnavailable("a request without its request record: its prompt is not known")
    try:
        kernel = context.for_request(req)
    except NotPortable as e:
        raise ScoresUnavailable(f"its processors cannot be rebuilt here: {e}") from None
    prompt = list(req["prompt"])
    calls = [(i, r) for i, r in enumerate(records)
             if r["type"] == "processor" and r["proc"] == -1 and r["role"] != "draft"]
    if any("scores_out" not in r for _, r in calls):
        raise ScoresUnavailable(NO_SCORES)
    actual, _ = kernel.fresh()  # fed the request's own calls, in order, on their own incoming scores
    history: list[int] = []
    out: list[CallScore] = []
    with torch.no_grad():
        for i, rec in calls:
            ids = [int(t) for t in rec["ids"]]
            incoming, native = _scores(rec["scores_in"]), np.frombuffer(rec["scores_out"], dtype=np.float32)
            history.append(ids[-1])
            replayed = actual(torch.tensor([ids]), incoming.reshape(1, -1).clone())[0].float().numpy()
            positioned = rec["role"] in ("verify", "step")
            intended = kernel.processed(ids, incoming.clone()).float().numpy() if positioned else None
            target = kernel.logits(ids).float().numpy() if positioned else None
            out.append(CallScore(
                record=i, role=rec["role"], position=len(ids) - len(prompt),
                draft_row=rec["role"] == "verify" and len(ids) > int(rec["committed"]),
                history=tuple(history), intended=(prompt[-1], *ids[len(prompt):]),
                tv_intended=None if intended is None else tv(native, intended), tv_actual=tv(native, replayed),
                tv_target=None if target is None else tv(incoming.numpy(), target)))
        for i, rec in enumerate(records):  # the target's logits at each returned position, where returned
            if rec["type"] == "return" and rec.get("logits"):
                tokens = rec["tokens"]
                for j, b in enumerate(rec["logits"]):
                    prefix = prompt + tokens[:j]
                    out.append(CallScore(record=i, role="returned logits", position=j, draft_row=False,
                                         history=(), intended=(), tv_intended=None, tv_actual=0.0,
                                         tv_target=tv(np.frombuffer(b, dtype=np.float32),
                                                      kernel.logits(prefix).float().numpy())))
    exposed = any(r["type"] == "draft" and r.get("draft") for r in records)
    return RequestScores(request, tuple(out), exposed)
