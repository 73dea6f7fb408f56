"""A set of decisions in one exit status, as `badc replay` gives one for a trace: 0 only when every
config was decided from work done in full and none was rejected; 1 when a config FAILS or a trace
replay found a contract violation; 3 when anything was left unchecked (README, "Commands"). A
report alone is not enough: a script that runs `badc run` in CI reads the status, so what was not
checked must show there too, never as a pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from badc_check.decide import FAILS, INCONCLUSIVE, VOID
from badc_replay.exact import DIFFERS, EQUAL_WITHIN_TOL

REJECTED_EXIT, UNCHECKED_EXIT = 1, 3


@dataclass(frozen=True)
class Outcome:
    """What the decisions say, one line per finding: `rejected` (a FAILS, a broken contract) and
    `unchecked` (what no decision covers: an INCONCLUSIVE or VOID config, a contract not replayed in
    full, a model without an exact law, a parameter that never acted on a draft, a pending config)."""

    rejected: tuple[str, ...]
    unchecked: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return REJECTED_EXIT if self.rejected else UNCHECKED_EXIT if self.unchecked else 0

    def lines(self, command: str) -> list[str]:
        """For stderr: each finding with the command's name, as `badc replay` says what it left unchecked."""
        return ([f"{command}: REJECTED: {r}" for r in self.rejected]
                + [f"{command}: UNCHECKED: {u}" for u in self.unchecked])


def _contract_parts(cid: str, contract: Mapping[str, Any] | None, required: bool) -> tuple[list[str], list[str]]:
    if contract is None:
        return [], [f"{cid}: contract not checked (no trace replay of the on arm)"] if required else []
    rejected, unchecked = [], []
    for arm, part in (("on", contract), ("off", contract.get("off"))):
        if part is None:
            continue
        status = part.get("status", "unchecked")
        if status == "broken":
            rejected.append(f"{cid}: {arm}-arm contract broken ({part.get('violating_requests', 0):,} of "
                            f"{part.get('requests', 0):,} requests)")
        elif status == "unchecked":
            why = "; ".join(part.get("left_unchecked") or []) or "not replayed in full"
            unchecked.append(f"{cid}: {arm}-arm contract unchecked: {why}")
    for name, n in sorted((contract.get("exposure") or {}).items()):
        if not n:
            unchecked.append(f"{cid}: {name} never acted on a draft, so speculation did not test it")
    return rejected, unchecked


def _exact_parts(cid: str, e: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """The exact channel's findings: DIFFERS and a sampled on-arm that departs from mu are rejections; a
    config whose channel is UNEXERCISED, NOT_ENUMERABLE or UNSUPPORTED was not checked by it."""
    if e is None:
        return [], []
    rejected, unchecked = [], []
    if e["status"] == DIFFERS:
        rejected.append(f"{cid}: exact channel DIFFERS (TV(mu, P) = {e['tv']:.6g} > tol {e['tol']:g})")
    elif e["status"] != EQUAL_WITHIN_TOL:
        unchecked.append(f"{cid}: exact channel {e['status']} ({e['reason']})")
    s = e.get("sampled_against_mu")
    if s and s["rejected"]:
        rejected.append(f"{cid}: the sampled on-arm departs from the engine's own scripted law mu (worst event "
                        f"{s['worst_event']}): its randomness or sampling kernel, premises (R1)/(iii)")
    return rejected, unchecked


def outcome(configs: Iterable[Mapping[str, Any]], pending: Iterable[Mapping[str, Any]] = (), *,
            contract_required: bool = True) -> Outcome:
    """The outcome of decided configs (report.json's `configs`, or `ConfigDecision.to_dict()`s) and of
    the configs a partial report lists as pending. A campaign replays its traces, so a config without
    a contract channel left it unchecked; a counts file (`badc check`) may carry none, and its
    decisions are then about the returned outputs alone (`contract_required=False`)."""
    rejected: list[str] = []
    unchecked: list[str] = []
    for c in configs:
        cid = c["id"]
        r, u = _exact_parts(cid, c.get("exact"))
        rejected += r
        unchecked += u
        if c["decision"] is None:  # --exact-only: no draws, so the exact channel is all there is
            continue
        why = next(iter(c.get("reasons") or []), "")  # the first reason; the report has them all
        if c["decision"] == FAILS:
            rejected.append(f"{cid}: FAILS" + (f" ({why})" if why else ""))
        elif c["decision"] in (INCONCLUSIVE, VOID):
            unchecked.append(f"{cid}: {c['decision']}" + (f" ({why})" if why else ""))
        if c.get("family_source") == "pilot":
            unchecked.append(f"{cid}: no exact law for its model, so calibration and witnesses were not checkable")
        r, u = _contract_parts(cid, c.get("contract"), contract_required)
        rejected += r
        unchecked += u
    unchecked += [f"{p['id']}: pending, not decided" + (f" ({p['failed']})" if p.get("failed") else "")
                  for p in pending]
    return Outcome(tuple(rejected), tuple(unchecked))
