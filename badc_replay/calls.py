"""Logical calls: the calls of a request that sequential decoding fixes by their logical prefix, for
`badc diff --by-prefix` (Engine.logical_calls)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LogicalCall:
    """One call of a request whose sequential counterpart is fixed by its logical prefix: in sequential
    decoding, the call `what` at `prefix` sees and gives one thing, whatever ran before it."""

    kind: str  # which call (with the prefix, the key calls are matched by): "processor 0", "row"
    what: str  # the call in words
    prefix: tuple[int, ...]  # the position's logical prefix, as the trace's ids count it
    seen: dict[str, Any]  # what it was given and gave (ids, scores, masks), by record field
    record: int  # its index among the request's records


def processor_calls(records: list[dict[str, Any]]) -> list[LogicalCall]:
    """Calls of records that carry the ids they saw and their logical length (`ids`, `logical_len`):
    a processor call's logical prefix is its first `logical_len` ids."""
    out = []
    for i, r in enumerate(records):
        if r.get("type") == "processor" and isinstance(r.get("ids"), list) and isinstance(r.get("logical_len"), int):
            out.append(LogicalCall(f"processor {r.get('proc')}", f"processor {r.get('proc')} ({r.get('name')}), "
                                   f"{r.get('role')} call", tuple(r["ids"][:r["logical_len"]]),
                                   {k: r[k] for k in ("ids", "scores_in", "scores_out") if k in r}, i))
    return out
