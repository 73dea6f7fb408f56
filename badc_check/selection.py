"""Which configurations get a repair-confirmation attempt (the paper's stage S3, §4.4 and §6.2).

Only a FAILS that is eligible, calibrated and compatible with its registered hypothesis (when it has
one) is confirmed. Configs that name the same repair share a cause, so each cause gets one attempt per
build: the first qualifying config by sealed `priority` (an integer, lower first; configs that give one
rank before those that do not, and roster order breaks ties). A VOID config bars its whole build from
confirmation. A group is decided only once every config of its build is decided; until then its
selection is pending.

The confirmation budget m is the number of (cause, build) groups in the roster, fixed at the seal (the
number of attempts can only be smaller), so confirmation draws can start group by group.

A config's optional `stratum` (an arm of a study's comparison, as RQ3's directed and random selection)
splits groups: each stratum gets its own attempt per cause and build, and counts in m. RQ3's other cell,
the same draws decided without A_H (`[campaign] confirm_without_hypothesis_events`), selects by the same
rule from those decisions (`without_hypothesis_events`); `joined` confirms what either cell selects,
and m counts both cells.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from badc_check.decide import FAILS, VOID, ConfigDecision

Group = tuple[str, str, str, str]  # (repair, engine, build, stratum or "")


@dataclass(frozen=True)
class Selection:
    attempts: tuple[str, ...]  # config ids to confirm, in roster order
    not_attempted: dict[str, str] = field(default_factory=dict)  # config id -> why it gets no attempt
    pending: tuple[str, ...] = ()  # configs with a repair whose group cannot be decided yet


def group_of(config: Mapping[str, Any]) -> Group | None:
    repair = config.get("repair")
    return None if not repair else (repair, config["engine"], config["build"], config.get("stratum") or "")


def confirmation_m(configs: Sequence[Mapping[str, Any]]) -> int:
    """The confirmation budget: one possible attempt per (cause, build) group of the roster."""
    return max(1, len({g for c in configs if (g := group_of(c)) is not None}))


def qualifies(d: ConfigDecision) -> str | None:
    """Why `d` cannot be confirmed, or None when it can."""
    if d.decision != FAILS:
        return f"decision {d.decision}, not FAILS"
    if not d.eligible:
        return "FAILS without eligible evidence (E2-E4)"
    if d.calibration.passed is not True:
        return "calibration not passed"
    if d.hypothesis is not None and not d.hypothesis.compatible:
        return f"incompatible with its hypothesis {d.hypothesis.id}"
    return None


def select_confirmations(configs: Sequence[Mapping[str, Any]],
                         decisions: Mapping[str, ConfigDecision | str | None]) -> Selection:
    """`decisions` maps each config id to its decision, a decision word for a config that could not be
    decided from draws (INCONCLUSIVE), or None while it is pending."""
    order = {c["id"]: i for i, c in enumerate(configs)}
    build_of = {c["id"]: (c["engine"], c["build"]) for c in configs}

    def word(cid: str) -> str | None:
        d = decisions.get(cid)
        return d.decision if isinstance(d, ConfigDecision) else d

    groups: dict[Group, list[Mapping[str, Any]]] = {}
    for c in configs:
        if (g := group_of(c)) is not None:
            groups.setdefault(g, []).append(c)
    attempts: list[str] = []
    not_attempted: dict[str, str] = {}
    pending: list[str] = []
    for (repair, engine, build, stratum), members in groups.items():
        ids = [c["id"] for c in members]
        same_build = [cid for cid, b in build_of.items() if b == (engine, build)]
        void = [cid for cid in same_build if word(cid) == VOID]
        if void:
            not_attempted.update({cid: f"build {engine}-{build} is barred from confirmation: {void[0]} is VOID"
                                  for cid in ids})
            continue
        if any(word(cid) is None for cid in same_build):
            pending += ids
            continue
        ranked = sorted(members, key=lambda c: (0, c["priority"], order[c["id"]]) if "priority" in c
                        else (1, 0, order[c["id"]]))
        chosen = None
        for c in ranked:
            d = decisions[c["id"]]
            why = qualifies(d) if isinstance(d, ConfigDecision) else f"decision {d}"
            if why is not None:
                not_attempted[c["id"]] = f"not confirmable: {why}"
            elif chosen is None:
                chosen = c["id"]
                attempts.append(chosen)
            else:
                not_attempted[c["id"]] = (f"one attempt per cause and build: {repair} on {engine}-{build}"
                                          + (f" (stratum {stratum})" if stratum else "")
                                          + f" is attempted through {chosen} (higher priority), whatever its result")
    return Selection(tuple(sorted(attempts, key=order.__getitem__)), not_attempted,
                     tuple(sorted(pending, key=order.__getitem__)))


def without_hypothesis_events(decisions: Mapping[str, ConfigDecision | str | None]
                              ) -> dict[str, ConfigDecision | str | None]:
    """The decisions of the cell without A_H and its complement: each config's decision and eligibility
    on the same draws without those events (calibration and compatibility are the config's own)."""
    out: dict[str, ConfigDecision | str | None] = {}
    for cid, d in decisions.items():
        w = d.without_hypothesis_events if isinstance(d, ConfigDecision) else None
        out[cid] = (dataclasses.replace(d, decision=w["decision"], eligible=w["eligible"])
                    if isinstance(d, ConfigDecision) and w is not None else d)
    return out


def joined(configs: Sequence[Mapping[str, Any]], *cells: Selection) -> Selection:
    """One selection confirming what any cell selects: attempts in roster order; a config is not attempted
    (with its first cell's reason) or pending only when no cell attempts it."""
    order = {c["id"]: i for i, c in enumerate(configs)}
    attempts = sorted({cid for s in cells for cid in s.attempts}, key=order.__getitem__)
    not_attempted: dict[str, str] = {}
    for s in cells:
        for cid, why in s.not_attempted.items():
            if cid not in attempts:
                not_attempted.setdefault(cid, why)
    pending = sorted({cid for s in cells for cid in s.pending} - set(attempts), key=order.__getitem__)
    return Selection(tuple(attempts), not_attempted, tuple(pending))
