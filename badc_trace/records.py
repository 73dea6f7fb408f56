"""The record types every probe writes, typed once: probes build them here, and replay's schemas
(badc_replay/schema.py) are derived from these same types, so what a probe writes and what replay
checks cannot drift apart.

An engine's own record types (processor, draft, stop_check, ...) are its probe's and its schema's;
`request` and `return` are shared envelopes that an engine extends with its own fields.
Light on purpose: imported inside engine processes.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations (3.11).
from enum import StrEnum
from typing import Any, Literal, NotRequired, TypedDict


class Counter(StrEnum):
    """The counters a probe keeps (`TraceSink.count`), written to the trace's `counts` record at every
    level. PROPOSED (draft tokens offered for verification) and ACCEPTED (those committed) are the
    evidence that speculation was exercised: a probe that does not count them leaves every config
    INCONCLUSIVE."""

    REQUESTS = "requests"
    PROPOSED = "proposed"
    ACCEPTED = "accepted"
    DRAFTER_CALLS = "drafter_calls"
    PROCESSOR_CALLS = "processor_calls"
    STOP_CHECKS = "stop_checks"
    KV_REMOVALS = "kv_removals"
    CRASHES = "crashes"
    PROBE_ERRORS = "probe_errors"


class RequestRecord(TypedDict):
    """A request began: its id and prompt token ids (an engine adds its own fields: params, api, ...)."""

    type: Literal["request"]
    req: int
    prompt: list[int]


class ReturnRecord(TypedDict):
    """A request ended: the token ids it returned and its outcome string (badc_trace/outcomes.py)."""

    type: Literal["return"]
    req: int
    tokens: list[int]
    outcome: str


class CrashRecord(TypedDict):
    """An exception in the engine: the request it hit (None: none in progress), where, and its class."""

    type: Literal["crash"]
    req: int | None
    where: str
    exc: str
    message: NotRequired[str]


class VocabRecord(TypedDict):
    """A tokenizer's pieces, one byte string per token id, once per process."""

    type: Literal["vocab"]
    name: str
    pieces: list[bytes]


# `counts` holds every Counter, each optional (a probe writes the ones it counted).
SHARED_TYPES: dict[str, type] = {"request": RequestRecord, "return": ReturnRecord, "crash": CrashRecord,
                                 "vocab": VocabRecord}


def request_record(req: int, prompt: list[int], **fields: Any) -> RequestRecord:
    return {"type": "request", "req": req, "prompt": prompt, **fields}  # type: ignore[typeddict-item]


def return_record(req: int, tokens: list[int], outcome: str, **fields: Any) -> ReturnRecord:
    return {"type": "return", "req": req, "tokens": tokens, **fields, "outcome": outcome}  # type: ignore[typeddict-item]


def crash_record(req: int | None, where: str, e: BaseException) -> CrashRecord:
    return {"type": "crash", "req": req, "where": where, "exc": type(e).__name__, "message": str(e)[:500]}


def vocab_record(name: str, pieces: list[bytes]) -> VocabRecord:
    return {"type": "vocab", "name": name, "pieces": pieces}
