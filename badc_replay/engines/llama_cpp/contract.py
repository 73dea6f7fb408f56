"""Contract replay of one request's records: D1 and D3 (offline)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from badc_replay.violations import Violation


def check_request(records: list[dict[str, Any]], config: Mapping[str, Any]) -> list[Any]:
    """D1: every processor call must see exactly its position's logical prefix (the first
    `logical_len` ids of the buffer; any more are unverified drafts). D3: the stopping re-check after
    the loop must see what sequential decoding would have evaluated."""
    out: list[Violation] = []
    req = next((r for r in records if r["type"] == "request"), None)
    ret = next((r for r in records if r["type"] == "return"), None)
    for i, rec in enumerate(records):
        if rec["type"] == "processor":
            ids, n = rec["ids"], rec["logical_len"]
            if len(ids) != n:
                extra = ids[n:]
                out.append(Violation(rec["req"], i, "D1",
                                     f"processor {rec['proc']} ({rec['name']}) at position {n - 1}",
                                     ids[:n], f"{n} ids (the logical prefix)",
                                     f"{len(ids)} ids, with unverified drafts {extra}" if len(ids) > n
                                     else f"{len(ids)} ids (a shorter prefix)"))
        elif rec["type"] == "stop_check" and rec["where"] == "postcheck" and req is not None and ret is not None:
            yielded = ret.get("yielded", [])
            # generate() returned (a criterion stopped it) -> all yielded ids were evaluated;
            # abandoned by the caller -> the last yielded id was never evaluated.
            returned = any(r["type"] == "stop_check" and r["where"] == "generate" and r["result"] for r in records)
            n = len(yielded) if returned else max(len(yielded) - 1, 0)
            expected = req["prompt"] + yielded[:n]
            if rec["ids"] != expected:
                extra = rec["ids"][len(expected):] if rec["ids"][: len(expected)] == expected else rec["ids"]
                out.append(Violation(rec["req"], i, "D3", "stopping re-check after the generation loop",
                                     expected, f"{len(expected)} ids (the evaluated committed prefix)",
                                     f"{len(rec['ids'])} ids, with unverified drafts {extra}"))
    return out
