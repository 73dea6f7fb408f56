"""Contract replay of a trace: which call, which prefix, what was expected, what was seen.

Each engine (badc_replay/engine.py) provides `check_request(records, config, context) ->
list[Violation]`, applied to the records of one request in trace order. `replay_traces` streams a trace file, groups
records by request and reports every violation and the first one per request. Where a probe records
the drafter's settings at each request's first drafter call, it also reports requests whose drafter
did not start as the first request's did: state carried over between draws. The result types are in
badc_replay/violations.py; this module is the driver, given an engine or finding the trace's own
through the registry.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from badc_replay.engine import Engine
from badc_replay.registry import UnknownEngineError, get_engine
from badc_replay.schema import checked
from badc_replay.text import trace_decoder, trace_vocab
from badc_replay.violations import (  # noqa: F401  (re-exported: where replay's result types were first found)
    BROKEN,
    CALL_TYPES,
    HELD,
    NOT_READ,
    UNCHECKED,
    CarryOver,
    ContractResult,
    RequestUnchecked,
    Violation,
    contract_status,
    merge_contracts,
)
from badc_trace.format import TraceReader, read_trace


def _requests(records: Iterator[dict[str, Any]], result: ContractResult | None = None,
              call_types: tuple[str, ...] = CALL_TYPES) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    # Records of one request are contiguous except drafter records, which carry the request id too.
    current: int | None = None
    batch: list[dict[str, Any]] = []
    for rec in records:
        rid = rec.get("req")
        if rid is None:
            if result is not None and rec.get("type") in call_types:  # a call no request claims: unchecked
                result.unattributed += 1
            continue
        if rid != current and batch:
            yield current, batch
            batch = []
        current = rid
        batch.append(rec)
    if batch:
        yield current, batch


def _rank(rec: dict[str, Any]) -> int:
    return {"request": 0, "return": 2}.get(rec.get("type"), 1)


def open_traces(paths: list[str], *, allow_torn_tail: bool = True) -> list[TraceReader]:
    """Readers of one run's traces (one per process), which must all be of one engine."""
    if not paths:
        raise ValueError("no trace to replay")
    readers = [read_trace(p, allow_torn_tail=allow_torn_tail) for p in paths]
    engines = {r.header["engine"] for r in readers}
    if len(engines) > 1:
        raise ValueError(f"the traces are of different engines ({', '.join(sorted(engines))}): replay each "
                         "engine's traces on their own")
    return readers


def engine_of(reader: TraceReader, engine: Engine | None = None) -> Engine:
    """`engine`, which must be the one the trace's header names, or the registered engine it names; a
    ValueError naming the trace when there is none."""
    name = reader.header["engine"]
    if engine is not None:
        if engine.name != name:
            raise ValueError(f"{reader.path}: a trace of engine {name!r}, not of {engine.name!r}")
        return engine
    try:
        return get_engine(name)
    except UnknownEngineError as e:
        raise ValueError(f"{reader.path}: no contract replay: {e}") from None


def requests_of(readers: list[TraceReader], result: ContractResult | None = None,
                call_types: tuple[str, ...] = CALL_TYPES,
                engine: Engine | None = None) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(request id, its records) of one trace (streamed) or of one run's traces (joined by id), every record
    checked against its engine's record schema first (badc_replay/schema.py): a record that does not fit is
    a TraceFormatError."""
    engine = engine_of(readers[0], engine)
    name = engine.name
    if engine.record_schema is None:
        raise ValueError(f"{readers[0].path}: engine {name!r} declares no record schema (Engine.record_schema), "
                         "so no record of its traces can be checked before a contract check reads it")
    check = None if result is None else result.schema
    streams = [checked(r, name, engine.record_schema, check) for r in readers]
    if len(readers) == 1:
        return _requests(streams[0], result, call_types)
    return _joined(streams, result or ContractResult(""), call_types)


def _joined(readers: list[Iterator[dict[str, Any]]], result: ContractResult,
            call_types: tuple[str, ...]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """The requests of one run's traces, one per process (vLLM's front end writes requests and returns,
    its engine core the steps): records joined by request id, each request's request record first,
    its return last, the rest in trace order. Holds the whole set in memory."""
    by_req: dict[int, list[dict[str, Any]]] = {}
    owner: dict[int, int] = {}  # which trace holds a request's request record
    for i, reader in enumerate(readers):
        for rec in reader:
            rid = rec.get("req")
            if rid is None:
                if rec.get("type") in call_types:
                    result.unattributed += 1
                continue
            if rec.get("type") == "request":
                if owner.setdefault(rid, i) != i:
                    result.partial["its request record is in two traces (two processes numbered their requests "
                                   "alike), so its records may be two requests'"] += 1
            by_req.setdefault(rid, []).append(rec)
    for rid in sorted(by_req):
        yield rid, sorted(by_req[rid], key=_rank)


class _Watched(list):
    """A request's records as the engine's check is given them: whether the check looked at any (iterated
    or indexed the list). A check that returns no violation without reading its request checked nothing,
    and must not make a held verdict."""

    read = False

    def __iter__(self) -> Any:
        self.read = True
        return super().__iter__()

    def __getitem__(self, i: Any) -> Any:
        self.read = True
        return super().__getitem__(i)




def replay_trace(path: str, *, allow_torn_tail: bool = True, engine: Engine | None = None) -> ContractResult:
    """Check every request of a trace against the engine's contract (streaming, constant memory)."""
    return replay_traces([path], allow_torn_tail=allow_torn_tail, engine=engine)


def replay_traces(paths: list[str], *, allow_torn_tail: bool = True, engine: Engine | None = None) -> ContractResult:
    """Check every request of one run's traces (one trace streams; several are joined by request id)
    against `engine`'s contract, or, when none is given, the registered engine the traces name."""
    readers = open_traces(paths, allow_torn_tail=allow_torn_tail)
    header = readers[0].header
    engine = engine_of(readers[0], engine)
    name = engine.name
    requests = requests_of(readers, result := ContractResult(name), engine.call_types, engine)
    result.notes = [f"{p}: trace format {'.'.join(map(str, r.header['version']))} has no sync records: its records "
                    "were checked against the end record's count only (in it, records reordered, or changed with "
                    "their chunk's checksums recomputed, are not detectable)"
                    for p, r in zip(paths, readers, strict=True) if r.header["version"] < [1, 1]]
    config = header.get("config", {})
    # Parts of a contract that need the engine itself (a kernel that replays fresh processors) come
    # with a context the engine builds when it can run here, or a reason why they cannot be checked.
    vocab = trace_vocab(paths)
    context, result.unchecked = engine.replay_context(header, vocab)
    result.decode = trace_decoder(engine, paths, header, vocab)
    for rid, records in requests:
        result.requests += 1
        result.calls += sum(1 for r in records if r["type"] in engine.call_types)
        watched = _Watched(records)
        try:
            found = engine.check_request(watched, config, context)
            if not watched.read:
                result.partial[NOT_READ] += 1
        except RequestUnchecked as e:
            found = e.found
            result.partial[e.reason] += 1
        if any(r["type"] == "crash" for r in records):
            result.partial["it crashed (the engine raised an exception): the calls it would have made after that "
                           "were never made, so its contract was not checked in full"] += 1
        if not any(r["type"] == "request" for r in records):
            result.partial["its records are in this trace, its request record is not (written by another "
                           "process, or lost before the trace's start)"] += 1
        elif not any(r["type"] == "return" for r in records):
            result.partial["it has no return record: its process ended before the request returned"] += 1
        for name, hit in engine.exposure(records).items():
            result.exposure[name] += int(hit)
        settings = next((r["settings"] for r in records if r["type"] == "draft" and "settings" in r), None)
        if settings is not None:
            result.note_settings(rid, settings)
        result.add(rid, found)
    result.unclosed, result.torn_tail = trace_tails(paths, readers)
    return result


def trace_tails(paths: list[str], readers: list[TraceReader]) -> tuple[list[str], str | None]:
    """After reading: the traces whose process was killed with every record written through (nothing
    lost), and where the others' tails are torn (records may be lost), or None."""
    unclosed, torn = [], []
    for p, r in zip(paths, readers, strict=True):
        t = r.torn_tail
        if t is not None and t.offset == os.path.getsize(p) and r.header.get("config", {}).get("write_through"):
            unclosed.append(p)  # killed at a chunk boundary, every record written through: nothing lost
        elif t is not None:
            torn.append((p, t))
    if not torn:
        return unclosed, None
    where = (lambda p: f"{p} byte") if len(paths) > 1 else (lambda p: "byte")
    return unclosed, "; ".join(f"{where(p)} {t.offset}: {t.reason}" for p, t in torn)
