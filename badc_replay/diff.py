"""The first divergence of two traces, as Markdown for an upstream bug report.

Requests are matched by id (a draw index in campaign traces, so the same seed on both sides) and
compared record by record on the fields that say what a call saw and did, scores included. A state
digest differing alone is not a divergence (a repaired processor carries its own bookkeeping); it is
shown when the record diverges otherwise. Typical use: the faulty arm against the repaired arm of the
same configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from badc_replay.contract import open_traces, requests_of

IGNORED = {"req", "created", "elapsed"}
SECONDARY = {"state"}


@dataclass(frozen=True)
class Divergence:
    request: int
    record: int
    kind: str
    a: dict[str, Any] | None
    b: dict[str, Any] | None
    fields: list[str]
    identical_before: int  # records identical before this one


def _differs(x: Any, y: Any) -> bool:
    if x == y:  # equal bytes are equal scores, NaN included
        return False
    if isinstance(x, bytes) and isinstance(y, bytes) and len(x) == len(y) and len(x) % 4 == 0:
        return not np.array_equal(np.frombuffer(x, np.float32), np.frombuffer(y, np.float32))
    return x != y


def first_divergence(a: str | list[str],
                     b: str | list[str]) -> tuple[dict[str, Any], dict[str, Any], Divergence | None]:
    """Each side a trace or the set of one run's traces (joined by request id)."""
    ra, rb = open_traces([a] if isinstance(a, str) else a), open_traces([b] if isinstance(b, str) else b)
    same = 0
    ia, ib = requests_of(ra), requests_of(rb)
    ra, rb = ra[0], rb[0]  # the headers that name each side
    for (qa, recs_a), (qb, recs_b) in zip(ia, ib, strict=False):
        if qa != qb:
            return ra.header, rb.header, Divergence(min(qa, qb), 0, "request", None, None, ["request id"], same)
        for i in range(max(len(recs_a), len(recs_b))):
            a = recs_a[i] if i < len(recs_a) else None
            b = recs_b[i] if i < len(recs_b) else None
            if a is None or b is None or a["type"] != b["type"]:
                return ra.header, rb.header, Divergence(qa, i, (a or b)["type"], a, b, ["type"], same)
            fields = sorted(k for k in set(a) | set(b) if k not in IGNORED and _differs(a.get(k), b.get(k)))
            if set(fields) - SECONDARY:
                return ra.header, rb.header, Divergence(qa, i, a["type"], a, b, fields, same)
            same += 1
    return ra.header, rb.header, None


def _show(v: Any) -> str:
    if isinstance(v, dict):  # e.g. a request's recorded generate() arguments: their bytes by size
        return repr({k: f"<{len(x)} bytes>" if isinstance(x, bytes) else x for k, x in v.items()})
    if isinstance(v, bytes):
        arr = np.frombuffer(v, np.float32) if len(v) % 4 == 0 else v
        return f"float32[{len(arr)}] {np.array2string(arr, precision=3, max_line_width=200)}" if len(v) % 4 == 0 \
            else f"{len(v)} bytes"
    if isinstance(v, list) and len(v) > 24:
        return f"{v[:8]} ... {v[-12:]} ({len(v)} items)"
    return repr(v)


def markdown(a: str | list[str], b: str | list[str]) -> str:
    ha, hb, d = first_divergence(a, b)
    path_a, path_b = (p if isinstance(p, str) else " + ".join(p) for p in (a, b))

    def who(h: dict[str, Any], p: str) -> str:
        cfg = h.get("config", {})
        return f"`{p}`: {h['engine']} {h['build']}, config `{cfg.get('id', '-')}`, arm `{cfg.get('arm', '-')}`"

    lines = ["### badc diff: first divergence", "", f"- **A** {who(ha, path_a)}", f"- **B** {who(hb, path_b)}", ""]
    if d is None:
        lines.append("No divergence: every request and call recorded in both traces is identical.")
        return "\n".join(lines) + "\n"
    lines.append(f"Request **{d.request}** (draw index; same seed on both sides), record {d.record}: "
                 f"`{d.kind}` differs in {', '.join(f'`{f}`' for f in d.fields)}. "
                 f"The {d.identical_before} records before it are identical.")
    lines += ["", "| field | A | B |", "|---|---|---|"]
    keys = [k for k in sorted(set(d.a or {}) | set(d.b or {})) if k not in IGNORED]
    for k in keys:
        va, vb = (d.a or {}).get(k), (d.b or {}).get(k)
        mark = " **≠**" if k in d.fields else ""
        lines.append(f"| {k}{mark} | {_show(va)} | {_show(vb)} |")
    if d.kind == "processor" and d.a and d.b:
        n = d.a.get("logical_len")
        lines += ["", f"Logical prefix of the position: {d.a['ids'][:n]} ({n} ids). "
                  f"A saw {len(d.a['ids'])} ids, B saw {len(d.b['ids'])}."]
    return "\n".join(lines) + "\n"
