"""D2 from level calls: the scores a trace keeps only as digests, recovered by re-running the request (live).

At level calls a processor record keeps 16-byte digests of its float32 scores (`out_digest`, and
`in_digest` where its incoming scores are not the previous element's outgoing ones), not the scores: on a
real vocabulary those are 196 KB a call. Replay runs the request again under the engine itself, with
speculation as the program had it and only the random draws scripted to follow the recorded path
(`torch.multinomial` draws the recorded tokens and, with a draft model, its proposals; `torch.rand_like`
accepts the proposals that were accepted), with the probe at level full in memory. When every processor
call of the re-run has the recorded ids and scores whose digests are the recorded ones, its scores are
the original run's bit for bit, and D2 is checked on them exactly as at level full. When anything differs
(another machine's float kernels, a draft length carried over from earlier requests), the request's D2
is unchecked, saying where the re-run left the trace: never a pass.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from badc_replay.engines.transformers.written_once import with_scores
from badc_trace.engines.transformers import scores_digest
from badc_trace.outcomes import parse_outcome
from badc_trace.portable import NotPortable


class _Records:
    """A trace writer that keeps the records in memory."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def close(self) -> None:
        pass


def draft_model_script(records: list[dict[str, Any]], prompt: list[int],
                       tokens: list[int]) -> tuple[list[int], list[int]]:
    """For a request with a draft model: every token the re-run draws, in the order generate() draws them
    (each step's proposal, sampled inside the assistant's generate(), then the target's token after the
    accepted ones), and each step's number of accepted proposals (speculative sampling keeps a proposal
    when its uniform draw is at most p/q; a rejected proposal cannot be drawn again from the residual
    max(p - q, 0), so the accepted ones are exactly those the returned tokens repeat)."""
    stream: list[int] = []
    accepted: list[int] = []
    for rec in records:
        if rec["type"] != "draft":
            continue
        start, proposal = len(rec["committed"]) - len(prompt), list(rec["draft"])
        n = 0
        while n < len(proposal) and start + n < len(tokens) and proposal[n] == tokens[start + n]:
            n += 1
        stream += proposal + tokens[start + n:start + n + 1]
        accepted.append(n)
    return stream, accepted


def rerun_records(model: Any, input_ids: Any, kwargs: dict[str, Any],
                  records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processor records (level full, scores resolved) of one generate() of `model` with `kwargs`
    (the drafter's included) following the request's recorded path: with prompt lookup every kept sampled
    row draws the next returned token (rows past them, which the engine discards, their most likely
    token); with a draft model each draw is the next of `draft_model_script`'s and each step's uniform
    draws accept exactly the proposals the request accepted."""
    import torch

    from badc_replay.engines.transformers.exact import candidates_watched, scripted_multinomial
    from badc_trace.engines.transformers import TransformersInstrumentor
    from badc_trace.instrument import TraceSink

    probe = TransformersInstrumentor()
    if probe.is_instrumented:
        raise NotPortable("the request is re-run under the probe, and the transformers probe is already installed "
                          "in this process")
    req = next(r for r in records if r["type"] == "request")
    tokens = list(next(r for r in records if r["type"] == "return")["tokens"])
    candidates: list[int] = []
    watched: Any = contextlib.nullcontext()
    original = {"multinomial": torch.multinomial, "rand_like": torch.rand_like}
    scripted = dict(original)
    if "assistant_model" in kwargs:
        stream, accepted = draft_model_script(records, list(req["prompt"]), tokens)
        draws, steps = iter(stream), iter(accepted)

        def multinomial(probs: Any, num_samples: int = 1, *a: Any, **k: Any) -> Any:
            rows = probs.reshape(-1, probs.shape[-1]).double().numpy()
            return torch.tensor([[next(draws, int(np.argmax(r)))] for r in rows])

        def rand_like(t: Any, *a: Any, **k: Any) -> Any:  # 0 accepts any ratio p/q; inf rejects it
            u = torch.zeros_like(t)
            n = next(steps, t.numel())
            u.view(-1)[n:n + 1] = float("inf")
            return u
        scripted.update(multinomial=multinomial, rand_like=rand_like)
    else:
        path = iter(tokens)
        scripted["multinomial"] = scripted_multinomial(candidates, lambda p: next(path, int(np.argmax(p))),
                                                       lambda i, p: int(np.argmax(p)))
        watched = candidates_watched(model, candidates)
    writer = _Records()
    sink = TraceSink(writer, "full", pieces=False)  # type: ignore[arg-type]
    probe.instrument(sink)
    torch.multinomial, torch.rand_like = scripted["multinomial"], scripted["rand_like"]
    try:
        with watched, torch.no_grad():
            model.generate(input_ids, **kwargs)
    except Exception as e:
        raise NotPortable(f"the re-run of the request raised {type(e).__name__}: {e}") from None
    finally:
        torch.multinomial, torch.rand_like = original["multinomial"], original["rand_like"]
        probe.uninstrument()
        sink.flush()
    return [r for r in with_scores(writer.records) if r["type"] == "processor"]


def scores_by_record(records: list[dict[str, Any]], rerun: Any) -> dict[int, tuple[bytes, bytes]]:
    """For one request traced at level calls: each processor element record's index -> its (incoming,
    outgoing) scores from a re-run, `rerun(records)` giving the re-run's processor records. Raises
    NotPortable naming the first call where the re-run is not the recorded run."""
    ret = next((r for r in records if r["type"] == "return"), None)
    if ret is None:
        raise NotPortable("the request has no return record, whose tokens a re-run follows")
    if parse_outcome(str(ret["outcome"])).crash:
        raise NotPortable("the request ended in a crash, which a re-run cannot follow")
    wanted = [(i, r) for i, r in enumerate(records) if r["type"] == "processor"]
    got = rerun(records)
    out: dict[int, tuple[bytes, bytes]] = {}
    for n, (i, a) in enumerate(wanted):
        if n >= len(got):
            raise NotPortable(f"the re-run made {len(got)} processor calls, the trace {len(wanted)}: record {i} "
                              f"(processor {a['proc']}, {a['role']}, {len(a['ids'])} ids) has no counterpart")
        b = got[n]
        for key in ("proc", "role", "ids"):
            if a[key] != b[key]:
                raise NotPortable(f"the re-run left the trace at record {i}, processor call {n}: {key} expected "
                                  f"{a[key]!r}, saw {b[key]!r}")
        if a["proc"] < 0:
            continue
        if "out_digest" not in a or "scores_in" not in b or "scores_out" not in b:
            raise NotPortable(f"record {i} (processor {a['proc']}) has no digest of its scores to check a re-run "
                              "against (traced by an older badc, or a record without them)")
        prev = wanted[n - 1][1] if n else None
        if "in_digest" not in a and not (prev is not None and prev["proc"] >= 0 and prev["ids"] == a["ids"]):
            # the probe leaves it out only where the scores are the previous element's outgoing ones, checked
            raise NotPortable(f"record {i} (processor {a['proc']}) has no digest of its incoming scores, and the "
                              "record before it is not an element of the same call: the re-run's incoming "
                              "scores cannot be checked")
        for key, side, digest in (("in_digest", "incoming", scores_digest(b["scores_in"])),
                                  ("out_digest", "outgoing", scores_digest(b["scores_out"]))):
            if key in a and a[key] != digest:
                raise NotPortable(f"the re-run did not reproduce record {i} (processor {a['proc']} "
                                  f"{a['name']}, {a['role']} call at {len(a['ids'])} ids) bit for bit: its {side} "
                                  f"scores' digest is {digest.hex()}, the trace's {a[key].hex()}")
        out[i] = (b["scores_in"], b["scores_out"])
    if len(got) != len(wanted):
        raise NotPortable(f"the re-run made {len(got)} processor calls, the trace {len(wanted)}")
    return out
