"""Per-configuration decisions: FAILS, NOT_REJECTED, INCONCLUSIVE, VOID (paper §4, DESIGN method rules).

Budget: every channel-S, channel-R and calibration bound of a campaign holds jointly at 1 - alpha,
each at tail alpha / (m B), B = 2 |family| + 2 |record events|. Compatibility has its own budget:
two-sided intervals at alpha / (m |family|), split over both sides.

Order of rules: an arm without draws is INCONCLUSIVE; failed calibration is VOID; zero proposals
are INCONCLUSIVE; a witness, D > threshold or a channel-R failure is FAILS; NOT_REJECTED further
needs speculation shown to be exercised (proposals counted), else INCONCLUSIVE. Eligible evidence
(E2-E4) is a FAILS with passed calibration, observed proposals, and a witness or D > threshold on a
crash-free event.

Every event of D is a set of returned outputs, so D lower-bounds the TV distance between the arms'
returned-output laws. Trace replay is the contract channel, reported beside the decision and never
folded into D: a config can be NOT_REJECTED on its returned law while its contract is broken, and
the report says both. An off-arm contract violation voids the config (A5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from badc_check.calibration import Calibration, calibrate
from badc_check.channels import (
    ChannelR,
    ChannelS,
    Predicate,
    RecordArm,
    Witnesses,
    channel_r,
    channel_s,
    find_witnesses,
    record_events,
    violates_any,
)
from badc_check.compatibility import Compatibility, compatibility
from badc_check.confirmation import RepairResult
from badc_check.events import EventFamily
from badc_trace.outcomes import parse_outcome

FAILS, NOT_REJECTED, INCONCLUSIVE, VOID = "FAILS", "NOT_REJECTED", "INCONCLUSIVE", "VOID"
DEFAULT_THRESHOLD = 0.01


@dataclass(frozen=True)
class Arm:
    """What one arm returned: outcome counts, requests whose replay found a contract violation (the
    off arm's void the config, A5), drafter exercise."""

    outcomes: Mapping[str, int]
    violations: int = 0
    proposed: int | None = None
    accepted: int | None = None

    @property
    def draws(self) -> int:
        return sum(self.outcomes.values())

    @property
    def crashes(self) -> int:
        return sum(k for y, k in self.outcomes.items() if parse_outcome(y).crash)


@dataclass(frozen=True)
class Config:
    id: str
    on: Arm
    off: Arm
    reference: Mapping[str, float] | None = None
    predicates: Mapping[str, Predicate] = field(default_factory=dict)
    hypothesis: tuple[str, Mapping[str, float]] | None = None  # (id, mu_H)
    records_status: str = "not_returned"
    records_on: RecordArm | None = None
    records_off: RecordArm | None = None
    declared_support: tuple[str, ...] | None = None
    engine: str = ""
    build: str = ""
    role: str = "probe"
    contract: Mapping[str, Any] | None = None  # the contract channel: the arms' replay summaries
    pilot: Mapping[str, int] | None = None  # no P (a model that cannot be enumerated): the sealed pilot's counts

    def family(self, hypothesis_events: bool = True) -> EventFamily:
        return event_family(self.reference, self.hypothesis, self.predicates, self.pilot, self.declared_support,
                            hypothesis_events)


def event_family(reference: Mapping[str, float] | None, hypothesis: tuple[str, Mapping[str, float]] | None,
                 predicates: Mapping[str, Predicate], pilot: Mapping[str, int] | None = None,
                 declared: tuple[str, ...] | None = None, hypothesis_events: bool = True) -> EventFamily:
    """A config's event family: from P and its hypothesis law (`hypothesis_events=False`: without A_H and
    its complement, its support's singletons kept), or, for a model without P, frozen from the sealed
    pilot's counts."""
    if reference is None and pilot is not None:
        return EventFamily.from_pilot(pilot, violates_any(predicates))
    hyps = {hypothesis[0]: hypothesis[1]} if hypothesis else {}
    return EventFamily.build(reference, hyps, declared, violates_any(predicates), hypothesis_events)


@dataclass(frozen=True)
class ConfigDecision:
    id: str
    engine: str
    build: str
    role: str
    decision: str
    eligible: bool
    D: float
    D_crash_free: float
    witnesses: Witnesses
    draws: dict[str, int]
    crashes: dict[str, int]
    exercise: dict[str, int | None]
    calibration: Calibration
    hypothesis: Compatibility | None
    records: ChannelR
    channel_s: ChannelS = field(repr=False)
    family_size: int = 0
    bounds: int = 0
    family_source: str = "reference"
    repair: RepairResult | None = None
    contract: dict[str, Any] | None = None
    reasons: tuple[str, ...] = ()
    look: dict[str, Any] | None = None  # `badc run --anytime`: the planned look that decided (looks.py)
    # the same draws decided without A_H and its complement (hypothesis_check): what the event adds
    without_hypothesis_events: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report.json fields of docs/interfaces.md ("Report"), plus the evidence behind them."""
        s = self.channel_s
        return {
            "id": self.id, "engine": self.engine, "build": self.build, "role": self.role,
            "decision": self.decision, "eligible": self.eligible, "D": self.D,
            "D_crash_free": self.D_crash_free, "D_event": s.argmax,
            "D_crash_free_event": s.argmax_crash_free,
            "witnesses": self.witnesses.count, "witnesses_checked": self.witnesses.checked,
            "witness_outcomes": self.witnesses.outcomes,
            "witness_predicates": list(self.witnesses.predicates),
            "numerical_zeros": self.witnesses.numerical_zeros,
            "draws": self.draws, "crashes": self.crashes, "exercise": self.exercise,
            "calibration": {"passed": self.calibration.passed, "off_violations": self.calibration.off_violations,
                            "worst_event": self.calibration.worst_event,
                            "worst_excess": self.calibration.worst_excess},
            "hypothesis": None if self.hypothesis is None else {
                "id": self.hypothesis.id, "compatible": self.hypothesis.compatible,
                "null_rejected": self.hypothesis.null_rejected, "worst_event": self.hypothesis.worst_event,
                "zero_veto": list(self.hypothesis.zero_veto)},
            "records": {"status": self.records.status, "failed": self.records.failed, "gap": self.records.gap},
            "repair": None if self.repair is None else self.repair.to_dict(),
            "contract": self.contract,
            "events": self.family_size, "bounds": self.bounds, "tail": s.tail,
            "family_source": self.family_source, "reasons": list(self.reasons), "anytime": self.look,
            "without_hypothesis_events": self.without_hypothesis_events,
        }


def decide(cfg: Config, *, alpha: float = 0.05, m: int = 1, threshold: float = DEFAULT_THRESHOLD,
           anytime: bool = False, family: EventFamily | None = None, spend: float = 1.0) -> ConfigDecision:
    """Decide one configuration. `anytime=True` uses confidence sequences, valid at every look.
    `spend` is the share of the config's error budget this look may use (alpha spent over planned
    looks, badc_check/looks.py): every bound, compatibility's included, is taken at that share."""
    if not 0 < spend <= 1:
        raise ValueError(f"spend must be in (0, 1], got {spend!r}")
    without = None  # the same draws without A_H: only beside the config's own family, never inside it
    if family is None and cfg.hypothesis is not None and cfg.reference is not None:
        w = decide(cfg, alpha=alpha, m=m, threshold=threshold, anytime=anytime, spend=spend,
                   family=cfg.family(hypothesis_events=False))
        without = {"decision": w.decision, "eligible": w.eligible, "D": w.D, "D_event": w.channel_s.argmax,
                   "D_crash_free": w.D_crash_free, "events": w.family_size}
    family = family or cfg.family()
    on, off = cfg.on, cfg.off
    n_on, n_off = on.draws, off.draws
    rec_events = record_events(cfg.records_on, cfg.records_off) if cfg.records_status == "complete" else []
    bounds = family.bounds_per_config + 2 * len(rec_events)
    tail = spend * alpha / (m * bounds)
    c_on = family.counts(on.outcomes)
    c_off = family.counts(off.outcomes)
    crash_free = family.crash_free(on.outcomes, off.outcomes)
    s = channel_s(family, c_on, n_on, c_off, n_off, tail, crash_free, anytime=anytime)
    wit = find_witnesses(on.outcomes, off.outcomes, cfg.reference, cfg.predicates)
    p_ref = None if cfg.reference is None else family.probabilities(cfg.reference)
    cal = calibrate([e.id for e in family.events], s.lower_off, p_ref, off.violations)
    rec = channel_r(cfg.records_status, cfg.records_on, cfg.records_off, tail, anytime=anytime)
    hyp = None
    if cfg.hypothesis is not None:
        hyp = compatibility(cfg.hypothesis[0], cfg.hypothesis[1], family, on.outcomes, c_on, n_on,
                            spend * alpha / (2 * m * len(family)), cfg.reference, anytime=anytime)

    reasons: list[str] = []
    detected = wit.count > 0 or s.D > threshold or rec.failed
    if n_on == 0 or n_off == 0:
        decision = INCONCLUSIVE
        reasons.append("an arm has no draws")
    elif cal.passed is False:
        decision = VOID
        reasons.append(f"calibration failed: {cal.off_violations} off-arm contract violations, "
                       f"worst event {cal.worst_event} exceeds P by {cal.worst_excess:.4f}")
    elif on.proposed == 0:
        decision = INCONCLUSIVE
        reasons.append("the drafter proposed no token: speculation was not exercised")
    elif detected:
        decision = FAILS
        if wit.count:
            reasons.append(f"{wit.count} structural witnesses ({', '.join(wit.predicates)})")
        if s.D > threshold:
            reasons.append(f"D = {s.D:.4f} > {threshold} on {s.argmax}")
            if s.D_crash_free < s.D:
                reasons.append(f"crash-free D = {s.D_crash_free:.4f} on {s.argmax_crash_free}")
        if rec.failed:
            reasons.append(f"channel R: record mismatch gap {rec.gap:.4f} > 0")
    elif on.proposed is None:
        decision = INCONCLUSIVE
        reasons.append("no drafter exercise counts: speculation not shown to be exercised")
    else:
        decision = NOT_REJECTED
    if cal.passed is None:
        reasons.append("no exact law: calibration and witnesses NOT CHECKABLE"
                       + (f" (events frozen from a sealed pilot of {sum(cfg.pilot.values()):,} draws)"
                          if family.source == "pilot" and cfg.pilot is not None else ""))
    eligible = (decision == FAILS and cal.passed is True and bool(on.proposed)
                and (wit.count > 0 or s.D_crash_free > threshold))
    return ConfigDecision(
        id=cfg.id, engine=cfg.engine, build=cfg.build, role=cfg.role, decision=decision, eligible=eligible,
        D=s.D, D_crash_free=s.D_crash_free, witnesses=wit, draws={"on": n_on, "off": n_off},
        crashes={"on": on.crashes, "off": off.crashes},
        exercise={"proposed": on.proposed, "accepted": on.accepted}, calibration=cal, hypothesis=hyp,
        records=rec, channel_s=s, family_size=len(family), bounds=bounds, family_source=family.source,
        contract=None if cfg.contract is None else dict(cfg.contract), reasons=tuple(reasons),
        without_hypothesis_events=without,
    )


def contract_cell(contract: Mapping[str, Any] | None) -> str:
    """The contract channel in a table cell: its status, with the violating share when broken."""
    if contract is None:
        return "unchecked"
    status = contract.get("status", "unchecked")
    if status == "broken":
        return f"**broken** ({contract['violating_requests']:,}/{contract['requests']:,} requests)"
    return "**unchecked**" if status == "unchecked" else status


def contract_lines(contract: Mapping[str, Any] | None, decision: str) -> list[str]:
    """The contract channel in words, beside the returned-output decision (never folded into it)."""
    if contract is None:
        return ["contract UNCHECKED: no trace replay of the on arm"]
    status = contract.get("status", "unchecked")
    lines = []
    if status == "broken":
        classes = ", ".join(f"{k} {v['calls']:,} calls in {v['requests']:,} requests"
                            for k, v in contract.get("by_class", {}).items())
        calls = f"{contract['violations']:,} violating calls in " if contract.get("violations") is not None else ""
        line = (f"contract BROKEN: {calls}{contract['violating_requests']:,} of {contract['requests']:,} on-arm "
                f"requests" + (f" ({classes})" if classes else ""))
        if decision == NOT_REJECTED:
            line += ("; the returned-output law was not rejected, but the engine broke the sequential contract "
                     "on the calls it made")
        lines.append(line)
    elif status == "held":
        calls = f"{contract['calls']:,} calls of " if contract.get("calls") is not None else ""
        lines.append(f"contract held: {calls}{contract['requests']:,} on-arm requests replayed in full, no violation")
    if contract.get("exposure"):
        lines.append(exposure_line(contract["exposure"], contract.get("requests", 0)))
    for why in contract.get("left_unchecked", []):
        lines.append(f"contract UNCHECKED: {why}")
    off = contract.get("off")
    if off is not None and off.get("status") != "held":
        lines.append(f"off-arm contract {off.get('status', 'unchecked')}: "
                     + "; ".join(off.get("left_unchecked") or [f"{off.get('violations', 0):,} violating calls"]))
    return lines


def exposure_line(exposure: Mapping[str, int], requests: int) -> str:
    """Per parameter, the on-arm requests in which it acted on a draft; one that never did was not tested
    by speculation, whatever the decision."""
    parts = [f"{name} in {n:,} of {requests:,} requests" + ("" if n else " (NEVER: speculation did not test it)")
             for name, n in sorted(exposure.items())]
    return "exposure (a parameter acting on a draft): " + "; ".join(parts)


def decide_all(configs: list[Config], *, alpha: float = 0.05, threshold: float = DEFAULT_THRESHOLD,
               m: int | None = None, anytime: bool = False) -> list[ConfigDecision]:
    """Decide a campaign: alpha is family-wise over its m configurations (default: all of them)."""
    m = m or len(configs)
    return [decide(c, alpha=alpha, m=m, threshold=threshold, anytime=anytime) for c in configs]


def should_stop(decision: ConfigDecision) -> bool:
    """In anytime mode an arm may stop once VOID or an eligible FAILS is certain: a FAILS without eligible
    evidence goes on, since more draws can make it eligible (and so confirmable); NOT_REJECTED needs
    the whole budget."""
    return decision.decision == VOID or (decision.decision == FAILS and decision.eligible)
