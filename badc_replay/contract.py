"""Contract replay of a trace: which call, which prefix, what was expected, what was seen.

Each engine (badc_replay/engine.py) provides `check_request(records, config, context) ->
list[Violation]`, applied to the records of one request in trace order. `replay_trace` streams a trace file, groups
records by request and reports every violation and the first one per request. Where a probe records
the drafter's settings at each request's first drafter call, it also reports requests whose drafter
did not start as the first request's did: state carried over between draws.

Every result has a status: `broken` (some call violated the contract), `held` (every request was
checked in full and none violated it) or `unchecked` (no violation found, but something was left
unchecked: a part of the contract this interpreter cannot check, a torn tail that may have lost
requests, no request at all, or records that name no request). `held` is never said of unchecked work.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from badc_replay.schema import SchemaCheck, checked
from badc_replay.text import Decoder, ids_text, trace_decoder, trace_vocab
from badc_trace.format import TraceReader, read_trace

BROKEN, HELD, UNCHECKED = "broken", "held", "unchecked"
CALL_TYPES = ("processor", "stop_check", "sample", "step")  # record types that are calls, unless an engine says


def contract_status(violations: int, left_unchecked: list[str]) -> str:
    return BROKEN if violations else UNCHECKED if left_unchecked else HELD


@dataclass(frozen=True)
class Violation:
    request: int
    call: int  # index of the record within its request
    kind: str  # D1 (context), D2 (state), D3 (stopping), D4 (records)
    what: str  # which call, in words
    prefix: list[int]  # the position's logical prefix
    expected: Any
    seen: Any

    def message(self, decode: Decoder | None = None) -> str:
        """In words; with `decode`, the text of the prefix (and of ids expected and seen) beside the ids."""
        def show(v: Any) -> str:
            text = ids_text(v, decode)
            return f"{v!r}" if text is None else f"{v!r} {text}"
        return (f"request {self.request}, call {self.call} ({self.what}), {self.kind}: at logical prefix "
                f"{show(self.prefix)} expected {show(self.expected)}, saw {show(self.seen)}")

    def to_dict(self, decode: Decoder | None = None) -> dict[str, Any]:
        out = {"request": self.request, "call": self.call, "kind": self.kind, "what": self.what,
               "prefix": self.prefix, "expected": self.expected, "seen": self.seen, "message": self.message(decode)}
        text = {k: ids_text(v, decode) for k, v in (("prefix", self.prefix), ("expected", self.expected),
                                                     ("seen", self.seen))}
        if any(t is not None for t in text.values()):
            out["text"] = {k: t for k, t in text.items() if t is not None}
        return out


class RequestUnchecked(Exception):
    """Raised by an engine's `check_request` when part of one request's contract could not be checked
    (its calls are in another process's trace, the trace has no scores for D2, the program's arguments
    could not be rebuilt): `reason` says what and why, `found` holds what the parts that were checked
    found. The request counts as checked, not in full."""

    def __init__(self, reason: str, found: list[Violation] | None = None):
        super().__init__(reason)
        self.reason, self.found = reason, list(found or ())


@dataclass(frozen=True)
class CarryOver:
    """A request whose drafter started from other settings than the trace's first request's drafter:
    state carried over from earlier requests (or the workers' environments differ), so a draw may depend
    on the draws before it, and a shard resumed in a fresh process may not draw what an unbroken run would."""

    request: int
    expected: dict[str, Any]  # the settings the trace's first request started with
    seen: dict[str, Any]

    def message(self) -> str:
        keys = sorted(k for k in self.expected.keys() | self.seen.keys() if self.expected.get(k) != self.seen.get(k))
        return (f"request {self.request}, first drafter call: expected the settings the first request started with "
                f"{ {k: self.expected.get(k) for k in keys} }, saw { {k: self.seen.get(k) for k in keys} }")

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request, "expected": self.expected, "seen": self.seen, "message": self.message()}


@dataclass
class ContractResult:
    engine: str
    requests: int = 0
    calls: int = 0
    violations: int = 0  # violating calls
    violating_requests: set[int] = field(default_factory=set)
    first_per_request: dict[int, Violation] = field(default_factory=dict)
    torn_tail: str | None = None
    unclosed: list[str] = field(default_factory=list)  # write-through traces of killed processes: none torn
    unchecked: str | None = None  # contract parts this interpreter could not check, and why
    unattributed: int = 0  # records that name no request, so no request's check saw them
    partial: Counter[str] = field(default_factory=Counter)  # requests not checked in full, per reason
    class_calls: Counter[str] = field(default_factory=Counter)  # violating calls per class (D1-D4)
    class_requests: dict[str, set[int]] = field(default_factory=dict)  # violating requests per class
    drafter_settings: dict[str, Any] | None = None  # what the first request's drafter started with
    carried_over: int = 0  # requests whose drafter started otherwise
    first_carry_over: CarryOver | None = None
    decode: Decoder | None = field(default=None, repr=False, compare=False)  # ids -> text, when known
    exposure: Counter[str] = field(default_factory=Counter)  # per parameter: requests where it acted on a draft
    schema: SchemaCheck = field(default_factory=SchemaCheck)  # records of types this reader does not know
    notes: list[str] = field(default_factory=list)  # what the traces' format version can prove, where less

    @property
    def first_violation(self) -> Violation | None:
        return self.first_per_request[min(self.first_per_request)] if self.first_per_request else None

    def left_unchecked(self) -> list[str]:
        """What this replay could not check, each in words; empty when every request was checked in full."""
        left = [self.unchecked] if self.unchecked else []
        left += self.schema.left_unchecked()
        if self.torn_tail:
            left.append(f"torn tail at {self.torn_tail}: records after it, and any request they held, are lost")
        if self.requests == 0:
            left.append("no request in the trace: nothing was checked")
        if self.unattributed:
            left.append(f"{self.unattributed} record(s) name no request, so no request's check saw them")
        left += [f"{n:,} of {self.requests:,} requests not checked in full: {why}" for why, n in self.partial.items()]
        return left

    @property
    def status(self) -> str:
        return contract_status(self.violations, self.left_unchecked())

    def add(self, rid: int, found: list[Violation]) -> None:
        for v in found:
            self.violations += 1
            self.violating_requests.add(rid)
            self.first_per_request.setdefault(rid, v)
            self.class_calls[v.kind] += 1
            self.class_requests.setdefault(v.kind, set()).add(rid)

    def to_dict(self) -> dict[str, Any]:
        first = self.first_violation
        return {"status": self.status, "calls": self.calls, "violations": self.violations, "requests": self.requests,
                "violating_requests": len(self.violating_requests),
                "by_class": {k: {"calls": self.class_calls[k], "requests": len(self.class_requests[k])}
                             for k in sorted(self.class_calls)},
                "first_violation": None if first is None else first.to_dict(self.decode), "torn_tail": self.torn_tail,
                "unclosed": self.unclosed,
                "unchecked": self.unchecked, "unattributed": self.unattributed,
                "partial": dict(self.partial),
                "left_unchecked": self.left_unchecked(), "drafter_settings": self.drafter_settings,
                "carried_over": self.carried_over, "exposure": dict(self.exposure),
                "first_carry_over": None if self.first_carry_over is None else self.first_carry_over.to_dict()}

    def note_settings(self, request: int, settings: dict[str, Any]) -> None:
        """A request's drafter started with `settings` (engines whose probes record them)."""
        if self.drafter_settings is None:
            self.drafter_settings = settings
        elif settings != self.drafter_settings:
            self.carried_over += 1
            if self.first_carry_over is None:
                self.first_carry_over = CarryOver(request, self.drafter_settings, settings)


def _left_unchecked(summary: dict[str, Any]) -> list[str]:
    """A shard summary's unchecked parts; shards written before `left_unchecked` existed say it in
    `unchecked` and `torn_tail`."""
    if "left_unchecked" in summary:
        return list(summary["left_unchecked"])
    result = ContractResult("", requests=summary.get("requests", 0), unchecked=summary.get("unchecked"),
                            torn_tail=summary.get("torn_tail"))
    return result.left_unchecked()


def merge_contracts(parts: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """One arm's contract summary from its shards' (`(first draw, ContractResult.to_dict())`, in draw
    order): counts add up, the first violation is the earliest request's, what a shard left unchecked
    is the arm's, and a shard that was not replayed at all leaves the arm unchecked. Every shard starts
    a fresh engine, so a shard whose drafter started otherwise than the first shard's adds one
    carried-over request (the workers' environments differ) to those carried over within the shards."""
    merged: dict[str, Any] = {"calls": 0, "violations": 0, "requests": 0, "violating_requests": 0,
                              "by_class": {}, "first_violation": None, "left_unchecked": [], "exposure": {}}
    between = ContractResult("")
    within = 0
    firsts: list[dict[str, Any]] = []
    for start, c in parts:
        if not c:
            merged["left_unchecked"].append(f"the shard from draw {start:,} was not replayed")
            continue
        for key in ("calls", "violations", "requests", "violating_requests"):
            merged[key] += c.get(key, 0)
        for kind, n in c.get("by_class", {}).items():
            got = merged["by_class"].setdefault(kind, {"calls": 0, "requests": 0})
            got["calls"] += n["calls"]
            got["requests"] += n["requests"]
        merged["left_unchecked"] += [f"draws from {start:,}: {why}" for why in _left_unchecked(c)]
        merged["first_violation"] = merged["first_violation"] or c.get("first_violation")
        for name, n in c.get("exposure", {}).items():
            merged["exposure"][name] = merged["exposure"].get(name, 0) + n
        if c.get("drafter_settings") is not None:
            between.note_settings(start, c["drafter_settings"])
        within += c.get("carried_over", 0)
        firsts += [c["first_carry_over"]] if c.get("first_carry_over") else []
    if between.drafter_settings is not None:  # engines whose probes record no settings leave these out
        firsts += [between.first_carry_over.to_dict()] if between.first_carry_over else []
        merged.update(drafter_settings=between.drafter_settings, carried_over=between.carried_over + within,
                      first_carry_over=min(firsts, key=lambda v: v["request"], default=None))
    if not parts or (merged["requests"] == 0 and not merged["left_unchecked"]):
        merged["left_unchecked"].append("no request was replayed")
    merged["status"] = contract_status(merged["violations"], merged["left_unchecked"])
    return merged


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


def _engine_of(reader: TraceReader) -> Any:
    """The registered engine the trace's header names; a ValueError naming the trace when none is."""
    from badc_replay.registry import UnknownEngineError, get_engine  # the registry imports this module

    try:
        return get_engine(reader.header["engine"])
    except UnknownEngineError as e:
        raise ValueError(f"{reader.path}: no contract replay: {e}") from None


def requests_of(readers: list[TraceReader], result: ContractResult | None = None,
                call_types: tuple[str, ...] = CALL_TYPES) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(request id, its records) of one trace (streamed) or of one run's traces (joined by id), every record
    checked against its engine's record schema first (badc_replay/schema.py): a record that does not fit is
    a TraceFormatError."""
    engine = _engine_of(readers[0])
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


NOT_READ = "the engine's contract check read none of its records"


def replay_trace(path: str, *, allow_torn_tail: bool = True) -> ContractResult:
    """Check every request of a trace against the engine's contract (streaming, constant memory)."""
    return replay_traces([path], allow_torn_tail=allow_torn_tail)


def replay_traces(paths: list[str], *, allow_torn_tail: bool = True) -> ContractResult:
    """Check every request of one run's traces (one trace streams; several are joined by request id)."""
    readers = open_traces(paths, allow_torn_tail=allow_torn_tail)
    header = readers[0].header
    engine = _engine_of(readers[0])
    name = engine.name
    requests = requests_of(readers, result := ContractResult(name), engine.call_types)
    result.notes = [f"{p}: trace format {'.'.join(map(str, r.header['version']))} has no sync records: its records "
                    "were checked against the end record's count only (in it, records reordered, or changed with "
                    "their chunk's checksums recomputed, are not detectable)"
                    for p, r in zip(paths, readers, strict=True) if r.header["version"] < [1, 1]]
    config = header.get("config", {})
    # Parts of a contract that need the engine itself (a kernel that replays fresh processors) come
    # with a context the engine builds when it can run here, or a reason why they cannot be checked.
    vocab = trace_vocab(paths)
    context, result.unchecked = engine.replay_context(header, vocab)
    result.decode = trace_decoder(paths, header, vocab)
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
