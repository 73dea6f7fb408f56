"""The score-level study of one run's traces (Supplement E and G; the types and the per-call figures are
in badc_replay/scores.py): the driver, given an engine or finding the traces' own through the registry."""

from __future__ import annotations

from collections.abc import Sequence

from badc_replay.contract import engine_of, open_traces, requests_of, trace_tails
from badc_replay.engine import Engine
from badc_replay.scores import ScoreStudy, ScoresUnavailable
from badc_replay.text import trace_vocab


def score_study(paths: Sequence[str], engine: Engine | None = None) -> ScoreStudy:
    """The study of every request of one run's traces, by `engine` (default: the registered engine the
    traces name); ScoresUnavailable says why it cannot run here."""
    readers = open_traces(list(paths))
    header = readers[0].header
    engine = engine_of(readers[0], engine)
    context, why = engine.replay_context(header, trace_vocab(paths))
    if context is None:
        raise ScoresUnavailable(why or f"{engine.name}: no kernel to replay here")
    out, partial = [], 0
    for rid, records in requests_of(readers, None, engine.call_types, engine):
        out.append(engine.score_request(rid, records, context))
        types = {r["type"] for r in records}
        partial += "crash" in types or "return" not in types
    if not out:
        raise ScoresUnavailable("the trace holds no request")
    _, torn = trace_tails(list(paths), readers)
    left = ([f"a torn tail ({torn}): requests after it are lost"] if torn else []) + (
        [f"{partial} requests crashed or never returned: the calls they would have made were never made"]
        if partial else [])
    return ScoreStudy(engine.name, tuple(out), tuple(left))
