"""What a contract replay finds, as types every layer may use: a violation (which call, which prefix,
what was expected, what was seen), a request left unchecked, a drafter carrying state over, one
replay's result and the merge of an arm's shards.

Every result has a status: `broken` (some call violated the contract), `held` (every request was
checked in full and none violated it) or `unchecked` (no violation found, but something was left
unchecked: a part of the contract this interpreter cannot check, a torn tail that may have lost
requests, no request at all, or records that name no request). `held` is never said of unchecked work.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from badc_replay.schema import SchemaCheck
from badc_replay.text import Decoder, ids_text

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


NOT_READ = "the engine's contract check read none of its records"
