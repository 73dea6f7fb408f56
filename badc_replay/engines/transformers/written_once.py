"""Scores written once (the probe, level full): each float32 vector of a processor-list call is in the
trace once. An element whose incoming scores are the previous element's outgoing ones has `in_previous`
instead of `scores_in`; a list whose scores are its recorded elements' has `scores_elements` (their
number) instead of `scores_in` and `scores_out`. `with_scores` puts them back before a check reads them.

A reference that does not resolve (a forged count, an element missing) is left unresolved: the call then
has no scores and its check says so (D2 unchecked), never reads another call's.
"""

from __future__ import annotations

from typing import Any


def with_scores(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One request's records with every processor call's `scores_in` and `scores_out` resolved (new dicts
    where something was filled in; the others as they are)."""
    out: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []  # the element records since the last list record
    for rec in records:
        if rec["type"] != "processor":
            out.append(rec)
            continue
        if rec["proc"] >= 0:
            if rec.get("in_previous") and "scores_in" not in rec:
                prev = group[-1] if group else None
                if prev is not None and "scores_out" in prev:
                    rec = {**rec, "scores_in": prev["scores_out"]}
            group.append(rec)
        else:
            n = rec.get("scores_elements")
            if n is not None and "scores_in" not in rec and 0 < n <= len(group):
                first, last = group[-n], group[-1]
                if "scores_in" in first and "scores_out" in last:
                    rec = {**rec, "scores_in": first["scores_in"], "scores_out": last["scores_out"]}
            group = []
        out.append(rec)
    return out
