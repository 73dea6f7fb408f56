"""The first divergence of two traces, as Markdown for an upstream bug report.

Requests are matched by id (a draw index in campaign traces, so the same seed on both sides) and
compared record by record on the fields that say what a call saw and did, scores included. A state
digest differing alone is not a divergence (a repaired processor carries its own bookkeeping); it is
shown when the record diverges otherwise. Typical use: the faulty arm against the repaired arm of the
same configuration.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from badc_replay.calls import LogicalCall, processor_calls  # noqa: F401  (re-exported: first defined here)
from badc_replay.contract import engine_of, open_traces, requests_of
from badc_replay.engine import Engine
from badc_replay.registry import get_engine
from badc_replay.text import Decoder, ids_text, trace_decoder

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


SCORE_TOLERANCE = 1e-4  # batched verification and single steps compute logits in different orders


def _scores_differ(x: Any, y: Any) -> bool:
    if not (isinstance(x, bytes) and isinstance(y, bytes) and len(x) == len(y) and len(x) % 4 == 0):
        return _differs(x, y)
    a, b = np.frombuffer(x, np.float32), np.frombuffer(y, np.float32)
    same_inf = (np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):
        return bool(np.any(~same_inf & ~(np.abs(a - b) <= SCORE_TOLERANCE)))


@dataclass(frozen=True)
class PrefixDivergence:
    request: int
    a: LogicalCall
    b: LogicalCall  # B's first call of the same kind at the same logical prefix
    fields: list[str]


@dataclass(frozen=True)
class PrefixComparison:
    header_a: dict[str, Any]
    header_b: dict[str, Any]
    divergence: PrefixDivergence | None
    agreeing: int  # calls at logical prefixes both sides reached that agreed (before the divergence)
    shared_requests: int  # request ids on both sides, up to the divergence


def _matched(ia: Iterator[tuple[int, Any]], ib: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any, Any]]:
    """(id, A's records, B's records) for the ids on both sides (each side in increasing id order)."""
    b = next(ib, None)
    for qa, recs_a in ia:
        while b is not None and b[0] < qa:
            b = next(ib, None)
        if b is None:
            return
        if b[0] == qa:
            yield qa, recs_a, b[1]


def first_prefix_divergence(a: list[str], b: list[str], engine: Engine | None = None) -> PrefixComparison:
    """The first call of A (in A's order, requests by id) that differs from B's call of the same kind at
    the same logical prefix: for a run with speculation against one without (or a repaired one), where
    records cannot be matched one to one. Scores compare within SCORE_TOLERANCE; incoming scores are
    shown, not compared (only what a call was given and what it gave decide). `engine`: both sides' engine
    (default: the registered engine each side's traces name)."""
    ra, rb = open_traces(a), open_traces(b)
    ha, hb = ra[0].header, rb[0].header
    ea, eb = engine_of(ra[0], engine), engine_of(rb[0], engine)
    agreeing, shared = 0, 0
    for qa, recs_a, recs_b in _matched(requests_of(ra, engine=ea), requests_of(rb, engine=eb)):
        shared += 1
        at_b: dict[tuple[str, tuple[int, ...]], LogicalCall] = {}
        for call in eb.logical_calls(recs_b):
            at_b.setdefault((call.kind, call.prefix), call)
        for call in ea.logical_calls(recs_a):
            twin = at_b.get((call.kind, call.prefix))
            if twin is None:
                continue
            fields = sorted(k for k in call.seen.keys() & twin.seen.keys()
                            if k != "scores_in" and _scores_differ(call.seen[k], twin.seen[k]))
            if fields:
                return PrefixComparison(ha, hb, PrefixDivergence(qa, call, twin, fields), agreeing, shared)
            agreeing += 1
    return PrefixComparison(ha, hb, None, agreeing, shared)


def _differs(x: Any, y: Any) -> bool:
    if x == y:  # equal bytes are equal scores, NaN included
        return False
    if isinstance(x, bytes) and isinstance(y, bytes) and len(x) == len(y) and len(x) % 4 == 0:
        return not np.array_equal(np.frombuffer(x, np.float32), np.frombuffer(y, np.float32))
    return x != y


def first_divergence(a: str | list[str], b: str | list[str], engine: Engine | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any], Divergence | None, int]:
    """Each side a trace or the set of one run's traces (joined by request id); also how many records
    were found identical before the divergence (or in all, without one). `engine`: both sides' engine
    (default: the registered engine each side's traces name)."""
    ra, rb = open_traces([a] if isinstance(a, str) else a), open_traces([b] if isinstance(b, str) else b)
    same = 0
    ia, ib = requests_of(ra, engine=engine), requests_of(rb, engine=engine)
    ra, rb = ra[0], rb[0]  # the headers that name each side
    for (qa, recs_a), (qb, recs_b) in zip(ia, ib, strict=False):
        if qa != qb:
            return ra.header, rb.header, Divergence(min(qa, qb), 0, "request", None, None, ["request id"], same), same
        for i in range(max(len(recs_a), len(recs_b))):
            a = recs_a[i] if i < len(recs_a) else None
            b = recs_b[i] if i < len(recs_b) else None
            if a is None or b is None or a["type"] != b["type"]:
                return ra.header, rb.header, Divergence(qa, i, (a or b)["type"], a, b, ["type"], same), same
            fields = sorted(k for k in set(a) | set(b) if k not in IGNORED and _differs(a.get(k), b.get(k)))
            if set(fields) - SECONDARY:
                return ra.header, rb.header, Divergence(qa, i, a["type"], a, b, fields, same), same
            same += 1
    return ra.header, rb.header, None, same


def _show(v: Any, decode: Decoder | None = None) -> str:
    text = ids_text(v, decode)
    if text is not None:
        return f"{_show(v)} {text}"
    if isinstance(v, dict):  # e.g. a request's recorded generate() arguments: their bytes by size
        return repr({k: f"<{len(x)} bytes>" if isinstance(x, bytes) else x for k, x in v.items()})
    if isinstance(v, bytes):
        arr = np.frombuffer(v, np.float32) if len(v) % 4 == 0 else v
        return f"float32[{len(arr)}] {np.array2string(arr, precision=3, max_line_width=200)}" if len(v) % 4 == 0 \
            else f"{len(v)} bytes"
    if isinstance(v, list) and len(v) > 24:
        return f"{v[:8]} ... {v[-12:]} ({len(v)} items)"
    return repr(v)


def _who(h: dict[str, Any], p: str) -> str:
    cfg = h.get("config", {})
    if "id" not in cfg and isinstance(cfg.get("argv"), list):  # badc-trace on a program
        return f"`{p}`: {h['engine']} {h['build']}, program `{' '.join(map(str, cfg['argv']))}`"
    return f"`{p}`: {h['engine']} {h['build']}, config `{cfg.get('id', '-')}`, arm `{cfg.get('arm', '-')}`"


def _cell(v: Any, decode: Decoder | None) -> str:
    return _show(v, decode).replace("|", "\\|")  # a table cell: a | in text would end it


def _table(a: dict[str, Any], b: dict[str, Any], fields: list[str], dec_a: Decoder | None,
           dec_b: Decoder | None) -> list[str]:
    lines = ["", "| field | A | B |", "|---|---|---|"]
    for k in [k for k in sorted(set(a) | set(b)) if k not in IGNORED]:
        mark = " **≠**" if k in fields else ""
        lines.append(f"| {k}{mark} | {_cell(a.get(k), dec_a)} | {_cell(b.get(k), dec_b)} |")
    return lines


@dataclass(frozen=True)
class DiffReport:
    markdown: str
    compared: int  # records (or, by prefix, calls) compared: none means nothing was checked


def markdown(a: str | list[str], b: str | list[str], *, by_prefix: bool = False,
             engine: Engine | None = None) -> DiffReport:
    """The first divergence as Markdown: record by record (same seeds: faulty against repaired), or
    `by_prefix`: calls matched by their logical prefix (with speculation against without). `engine`: both
    sides' engine (default: the registered engine each side's traces name)."""
    pa, pb = ([p] if isinstance(p, str) else p for p in (a, b))
    path_a, path_b = (" + ".join(p) for p in (pa, pb))
    if by_prefix:
        cmp = first_prefix_divergence(pa, pb, engine)
        ha, hb = cmp.header_a, cmp.header_b
    else:
        ha, hb, d, same = first_divergence(pa, pb, engine)
    dec_a, dec_b = (trace_decoder(engine or get_engine(h["engine"]), p, h) for p, h in ((pa, ha), (pb, hb)))
    lines = ["### badc diff: first divergence" + (" by logical prefix" if by_prefix else ""), "",
             f"- **A** {_who(ha, path_a)}", f"- **B** {_who(hb, path_b)}", ""]
    if by_prefix:
        pd = cmp.divergence
        if pd is None:
            lines.append(f"No divergence: at every logical prefix both sides reached, in {cmp.shared_requests} "
                         f"requests on both sides, A's {cmp.agreeing} calls saw and gave what B's did (scores "
                         f"within {SCORE_TOLERANCE:g}). Prefixes one side never reached are not compared.")
            return DiffReport("\n".join(lines) + "\n", cmp.agreeing)
        lines.append(f"Request **{pd.request}**, at logical prefix {_cell(list(pd.a.prefix), dec_a)} "
                     f"({len(pd.a.prefix)} ids): A's {pd.a.what} (record {pd.a.record}) differs from B's "
                     f"{pd.b.what} (record {pd.b.record}) at the same prefix in "
                     f"{', '.join(f'`{f}`' for f in pd.fields)}. Before it, {cmp.agreeing} calls at prefixes both "
                     f"sides reached agreed (scores within {SCORE_TOLERANCE:g}; `scores_in` is shown, not compared).")
        lines += _table(pd.a.seen, pd.b.seen, pd.fields, dec_a, dec_b)
        return DiffReport("\n".join(lines) + "\n", cmp.agreeing + 1)
    if d is None:
        lines.append("No divergence: every request and call recorded in both traces is identical.")
        return DiffReport("\n".join(lines) + "\n", same)
    lines.append(f"Request **{d.request}** (draw index; same seed on both sides), record {d.record}: "
                 f"`{d.kind}` differs in {', '.join(f'`{f}`' for f in d.fields)}. "
                 f"The {d.identical_before} records before it are identical.")
    lines += _table(d.a or {}, d.b or {}, d.fields, dec_a, dec_b)
    if d.kind == "processor" and d.a and d.b:
        n = d.a.get("logical_len")
        lines += ["", f"Logical prefix of the position: {_cell(d.a['ids'][:n], dec_a)} ({n} ids). "
                  f"A saw {len(d.a['ids'])} ids, B saw {len(d.b['ids'])}."]
    lines += ["", "Record by record assumes the same seeds and the same drafting on both sides (faulty against "
              "repaired); for a run with speculation against one without, compare calls by logical prefix "
              "(`badc diff --by-prefix`)."]
    return DiffReport("\n".join(lines) + "\n", same + 1)
