"""Contract replay of one request's records: D1 without the engine; D2, D3 with the kernel (offline)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from badc_replay.engines.transformers.config import NEG_INF_FLOOR, SCORE_TOLERANCE
from badc_replay.engines.transformers.kernel import Kernel
from badc_replay.engines.transformers.rerun import scores_by_record
from badc_replay.violations import RequestUnchecked, Violation
from badc_trace.portable import NotPortable

NO_SCORES = ("trace with `badc-trace --level full` to record the scores, and D2 checks each processor's output "
             "against a fresh one replayed along the prefix without a re-run")


def _text(tokens: tuple[int, ...] | list[int]) -> str:
    from badc_trace.tiny.transformers import VOCAB

    return "".join(VOCAB[t] if 0 <= t < len(VOCAB) else "?" for t in tokens)



def _floats(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float32)


def _score_diff(expected: np.ndarray, seen: np.ndarray) -> float:
    """Largest difference, with masked scores compared as masked."""
    me, ms = expected <= NEG_INF_FLOOR, seen <= NEG_INF_FLOOR
    if (me != ms).any():
        return float("inf")
    keep = ~me
    return float(np.max(np.abs(expected[keep].astype(np.float64) - seen[keep]))) if keep.any() else 0.0


def _most_different(expected: np.ndarray, seen: np.ndarray, k: int = 5) -> list[int]:
    """The k tokens whose scores differ most (a masked one against an unmasked one first): a real
    vocabulary has tens of thousands, and a message shows these."""
    me, ms = expected <= NEG_INF_FLOOR, seen <= NEG_INF_FLOOR
    gap = np.where(me | ms, 0.0, np.abs(expected.astype(np.float64) - seen))
    gap[me != ms] = np.inf
    order = np.argsort(-gap, kind="stable")[:k]
    return sorted(int(t) for t in order if gap[t] > SCORE_TOLERANCE)


def _scores(scores: np.ndarray, tokens: list[int]) -> list[float | str]:
    return ["-inf" if scores[t] <= NEG_INF_FLOOR else round(float(scores[t]), 4) for t in tokens]


def check_request(records: list[dict[str, Any]], config: Mapping[str, Any], context: Any = None) -> list[Any]:
    """D1: each position's processor call sees its logical prefix (committed ids, plus drafts d1..di at
    verification row i). D2 (kernel): each element's output equals a fresh element replayed along
    that prefix and applied to the same incoming scores. D3 (kernel): stopping evaluated on committed
    ids agrees with the sequential stop map, and no committed token lies past a sequential stop.
    `context` gives the request's kernel (`for_request`: a campaign's Kernel, or ProgramKernels);
    what it cannot check is raised as RequestUnchecked with what the rest found."""

    out: list[Violation] = []
    req = next((r for r in records if r["type"] == "request"), None)
    ret = next((r for r in records if r["type"] == "return"), None)
    if req is None:
        return out
    prompt = req["prompt"]
    draft: dict[str, Any] | None = None
    kernel: Kernel | None = None
    unchecked: str | None = None
    if context is not None:
        try:
            kernel = context.for_request(req)
        except NotPortable as e:
            unchecked = f"D2 and D3 not checked: {e}"
    stop_map = kernel.stop_map if kernel is not None else None
    rerun: dict[int, tuple[bytes, bytes]] = {}
    if kernel is not None and any(r["type"] == "processor" and r["proc"] >= 0 and r["role"] in ("verify", "step")
                                  and ("scores_in" not in r or "scores_out" not in r) for r in records):
        try:  # level calls: the scores are digests; a re-run of the request recovers them (rerun.py)
            rerun = scores_by_record(records, kernel.rerun)
        except NotPortable as e:
            unchecked = f"D2 not checked: {e}; {NO_SCORES}"
    checked_to = len(prompt)
    for i, rec in enumerate(records):
        kind = rec["type"]
        if kind == "draft":
            draft = rec
        elif kind == "processor" and rec["role"] in ("verify", "step"):
            ids = rec["ids"]
            if rec["role"] == "verify" and draft is not None:
                committed = draft["committed"]
                expected = committed + draft["draft"][: max(len(ids) - len(committed), 0)]
            else:
                expected = prompt + (ret["tokens"] if ret else [])[: max(len(ids) - len(prompt), 0)]
            if rec["proc"] == -1 and ids != expected:
                out.append(Violation(rec["req"], i, "D1", f"processor list, {rec['role']} call", expected,
                                     f"{len(expected)} ids (the position's logical prefix)", f"ids {ids}"))
            scores = (rec["scores_in"], rec["scores_out"]) if "scores_in" in rec and "scores_out" in rec \
                else rerun.get(i)
            if kernel is not None and rec["proc"] >= 0 and scores is None:
                unchecked = unchecked or f"D2 not checked: record {i} has no scores; {NO_SCORES}"
            elif kernel is not None and rec["proc"] >= 0 and scores is not None:
                want = kernel.expected_element(rec["proc"], ids, scores[0])
                seen = _floats(scores[1])
                diff = _score_diff(want, seen)
                if diff > SCORE_TOLERANCE:
                    tokens = _most_different(want, seen)
                    out.append(Violation(rec["req"], i, "D2", f"processor {rec['proc']} ({rec['name']}), {rec['role']} "
                                         f"call at position {len(ids) - len(prompt)}", ids,
                                         f"scores of a fresh {rec['name']} replayed along the prefix, at tokens "
                                         f"{tokens}: {_scores(want, tokens)}",
                                         f"{_scores(seen, tokens)} (max difference {diff:.3g} over {want.size} "
                                         f"tokens; state {rec.get('state')})"))
        elif kind == "stop_check" and stop_map is not None and rec.get("where", "committed") == "committed":
            ids = rec["ids"]
            for t in range(checked_to + 1, len(ids)):
                if stop_map(ids[:t]):
                    out.append(Violation(rec["req"], i, "D3", "stopping after a verification block", ids[:t],
                                         f"stop after {t - len(prompt)} new tokens (sequential stop map)",
                                         f"first evaluated at {len(ids) - len(prompt)} new tokens {ids[len(prompt):]}, "
                                         f"result {rec['result']}"))
                    break
            if stop_map(ids) != rec["result"]:
                out.append(Violation(rec["req"], i, "D3", "stopping on committed ids", ids,
                                     f"stop map {stop_map(ids)}", f"result {rec['result']}"))
            checked_to = max(checked_to, len(ids))
    if unchecked:
        raise RequestUnchecked(unchecked, out)
    return out
