"""Contract replay of a trace: which call, which prefix, what was expected, what was seen.

Each engine module of badc_replay provides `check_request(records, config) -> list[Violation]`,
applied to the records of one request in trace order. `replay_trace` streams a trace file, groups
records by request and reports every violation and the first one per request. Where a probe records
the drafter's settings at each request's first drafter call, it also reports requests whose drafter
did not start as the first request's did: state carried over between draws.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from badc_trace.format import TraceReader, read_trace


@dataclass(frozen=True)
class Violation:
    request: int
    call: int  # index of the record within its request
    kind: str  # D1 (context), D2 (state), D3 (stopping), D4 (records)
    what: str  # which call, in words
    prefix: list[int]  # the position's logical prefix
    expected: Any
    seen: Any

    def message(self) -> str:
        return (f"request {self.request}, call {self.call} ({self.what}), {self.kind}: at logical prefix "
                f"{self.prefix} expected {self.expected!r}, saw {self.seen!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request, "call": self.call, "kind": self.kind, "what": self.what,
                "prefix": self.prefix, "expected": self.expected, "seen": self.seen, "message": self.message()}


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
    unchecked: str | None = None  # contract parts this interpreter could not check, and why
    drafter_settings: dict[str, Any] | None = None  # what the first request's drafter started with
    carried_over: int = 0  # requests whose drafter started otherwise
    first_carry_over: CarryOver | None = None

    @property
    def first_violation(self) -> Violation | None:
        return self.first_per_request[min(self.first_per_request)] if self.first_per_request else None

    def to_dict(self) -> dict[str, Any]:
        first = self.first_violation
        return {"calls": self.calls, "violations": self.violations, "requests": self.requests,
                "violating_requests": len(self.violating_requests),
                "first_violation": None if first is None else first.to_dict(), "torn_tail": self.torn_tail,
                "unchecked": self.unchecked, "drafter_settings": self.drafter_settings,
                "carried_over": self.carried_over,
                "first_carry_over": None if self.first_carry_over is None else self.first_carry_over.to_dict()}

    def note_settings(self, request: int, settings: dict[str, Any]) -> None:
        """A request's drafter started with `settings` (engines whose probes record them)."""
        if self.drafter_settings is None:
            self.drafter_settings = settings
        elif settings != self.drafter_settings:
            self.carried_over += 1
            if self.first_carry_over is None:
                self.first_carry_over = CarryOver(request, self.drafter_settings, settings)


def merge_contracts(parts: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """One arm's contract summary from its shards' (`(first draw, ContractResult.to_dict())`, in draw
    order): counts add up, the first violation is the earliest request's. Every shard starts a fresh
    engine, so a shard whose drafter started otherwise than the first shard's adds one carried-over
    request (the workers' environments differ) to those carried over within the shards."""
    merged: dict[str, Any] = {"calls": 0, "violations": 0, "requests": 0, "violating_requests": 0,
                              "first_violation": None}
    between = ContractResult("")
    within = 0
    firsts: list[dict[str, Any]] = []
    for start, c in parts:
        for key in ("calls", "violations", "requests", "violating_requests"):
            merged[key] += c.get(key, 0)
        merged["first_violation"] = merged["first_violation"] or c.get("first_violation")
        if c.get("drafter_settings") is not None:
            between.note_settings(start, c["drafter_settings"])
        within += c.get("carried_over", 0)
        firsts += [c["first_carry_over"]] if c.get("first_carry_over") else []
    if between.drafter_settings is not None:  # engines whose probes record no settings leave these out
        firsts += [between.first_carry_over.to_dict()] if between.first_carry_over else []
        merged.update(drafter_settings=between.drafter_settings, carried_over=between.carried_over + within,
                      first_carry_over=min(firsts, key=lambda v: v["request"], default=None))
    return merged


def _requests(reader: TraceReader) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    # Records of one request are contiguous except drafter records, which carry the request id too.
    current: int | None = None
    batch: list[dict[str, Any]] = []
    for rec in reader:
        rid = rec.get("req")
        if rid is None:
            continue
        if rid != current and batch:
            yield current, batch
            batch = []
        current = rid
        batch.append(rec)
    if batch:
        yield current, batch


def replay_trace(path: str, *, allow_torn_tail: bool = True) -> ContractResult:
    """Check every request of a trace against the engine's contract (streaming, constant memory)."""
    reader = read_trace(path, allow_torn_tail=allow_torn_tail)
    engine = reader.header["engine"]
    try:
        module = importlib.import_module(f"badc_replay.engines.{engine}")
    except ModuleNotFoundError:
        raise ValueError(f"{path}: no contract replay for engine {engine!r}") from None
    config = reader.header.get("config", {})
    result = ContractResult(engine)
    # Parts of a contract that need the engine itself (transformers' D2/D3 replay fresh processors)
    # come with a context the engine module builds when it can run here.
    context = None
    if hasattr(module, "replay_context"):
        context, result.unchecked = module.replay_context(reader.header)
    for rid, records in _requests(reader):
        result.requests += 1
        result.calls += sum(1 for r in records if r["type"] in ("processor", "stop_check", "sample", "step"))
        found = module.check_request(records, config, context) if context is not None else \
            module.check_request(records, config)
        settings = next((r["settings"] for r in records if r["type"] == "draft" and "settings" in r), None)
        if settings is not None:
            result.note_settings(rid, settings)
        for v in found:
            result.violations += 1
            result.violating_requests.add(rid)
            result.first_per_request.setdefault(rid, v)
    if reader.torn_tail is not None:
        result.torn_tail = f"byte {reader.torn_tail.offset}: {reader.torn_tail.reason}"
    return result
