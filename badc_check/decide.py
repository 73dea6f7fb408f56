"""Per-configuration decisions: FAILS, NOT_REJECTED, INCONCLUSIVE, VOID (paper §4, DESIGN method rules).

Budget: every channel-S, channel-R and calibration bound of a campaign holds jointly at 1 - alpha,
each at tail alpha / (m B), B = 2 |family| + 2 |record events|. Compatibility has its own budget:
two-sided intervals at alpha / (m |family|), split over both sides.

Order of rules: an arm without draws is INCONCLUSIVE; failed calibration is VOID; zero proposals
are INCONCLUSIVE; a witness, D > threshold or a channel-R failure is FAILS; NOT_REJECTED further
needs speculation shown to be exercised (proposals counted), else INCONCLUSIVE. Eligible evidence
(E2-E4) is a FAILS with passed calibration, observed proposals, and a witness or D > threshold on a
crash-free event of returned outputs (the contract-violation event fails a configuration, but it is
about traced calls, so it does not by itself show that the returned law changed).
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
)
from badc_check.compatibility import Compatibility, compatibility
from badc_check.confirmation import RepairResult
from badc_check.events import EventFamily
from badc_trace.outcomes import parse_outcome

FAILS, NOT_REJECTED, INCONCLUSIVE, VOID = "FAILS", "NOT_REJECTED", "INCONCLUSIVE", "VOID"
DEFAULT_THRESHOLD = 0.01


@dataclass(frozen=True)
class Arm:
    """What one arm returned: outcome counts, contract violations found by replay, drafter exercise."""

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

    def family(self) -> EventFamily:
        hyps = {self.hypothesis[0]: self.hypothesis[1]} if self.hypothesis else {}
        return EventFamily.build(self.reference, hyps, self.declared_support)


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

    def to_dict(self) -> dict[str, Any]:
        """The report.json fields of DESIGN.md ("Report"), plus the evidence behind them."""
        s = self.channel_s
        return {
            "id": self.id, "engine": self.engine, "build": self.build, "role": self.role,
            "decision": self.decision, "eligible": self.eligible, "D": self.D,
            "D_returned": s.D_returned, "D_crash_free": self.D_crash_free, "D_event": s.argmax,
            "D_crash_free_event": s.argmax_crash_free,
            "witnesses": self.witnesses.count, "witness_outcomes": self.witnesses.outcomes,
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
            "family_source": self.family_source, "reasons": list(self.reasons),
        }


def decide(cfg: Config, *, alpha: float = 0.05, m: int = 1, threshold: float = DEFAULT_THRESHOLD,
           anytime: bool = False, family: EventFamily | None = None) -> ConfigDecision:
    """Decide one configuration. `anytime=True` uses confidence sequences, valid at every look."""
    family = family or cfg.family()
    on, off = cfg.on, cfg.off
    n_on, n_off = on.draws, off.draws
    rec_events = record_events(cfg.records_on, cfg.records_off) if cfg.records_status == "complete" else []
    bounds = family.bounds_per_config + 2 * len(rec_events)
    tail = alpha / (m * bounds)
    c_on = family.counts(on.outcomes, on.violations)
    c_off = family.counts(off.outcomes, off.violations)
    crash_free = family.crash_free(on.outcomes, off.outcomes)
    s = channel_s(family, c_on, n_on, c_off, n_off, tail, crash_free, anytime=anytime)
    wit = find_witnesses(on.outcomes, off.outcomes, cfg.reference, cfg.predicates)
    p_ref = None if cfg.reference is None else family.probabilities(cfg.reference)
    cal = calibrate([e.id for e in family.events], s.lower_off, p_ref, off.violations)
    rec = channel_r(cfg.records_status, cfg.records_on, cfg.records_off, tail)
    hyp = None
    if cfg.hypothesis is not None:
        hyp = compatibility(cfg.hypothesis[0], cfg.hypothesis[1], family, on.outcomes, c_on, n_on,
                            alpha / (2 * m * len(family)), cfg.reference)

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
            if s.D_returned < s.D:
                reasons.append(f"on returned outputs D = {s.D_returned:.4f} (crash-free {s.D_crash_free:.4f} "
                               f"on {s.argmax_crash_free})")
        if rec.failed:
            reasons.append(f"channel R: record mismatch gap {rec.gap:.4f} > 0")
    elif on.proposed is None:
        decision = INCONCLUSIVE
        reasons.append("no drafter exercise counts: speculation not shown to be exercised")
    else:
        decision = NOT_REJECTED
    if cal.passed is None:
        reasons.append("no reference law: calibration and witnesses not checked")
    eligible = (decision == FAILS and cal.passed is True and bool(on.proposed)
                and (wit.count > 0 or s.D_crash_free > threshold))
    return ConfigDecision(
        id=cfg.id, engine=cfg.engine, build=cfg.build, role=cfg.role, decision=decision, eligible=eligible,
        D=s.D, D_crash_free=s.D_crash_free, witnesses=wit, draws={"on": n_on, "off": n_off},
        crashes={"on": on.crashes, "off": off.crashes},
        exercise={"proposed": on.proposed, "accepted": on.accepted}, calibration=cal, hypothesis=hyp,
        records=rec, channel_s=s, family_size=len(family), bounds=bounds, family_source=family.source,
        reasons=tuple(reasons),
    )


def decide_all(configs: list[Config], *, alpha: float = 0.05, threshold: float = DEFAULT_THRESHOLD,
               m: int | None = None, anytime: bool = False) -> list[ConfigDecision]:
    """Decide a campaign: alpha is family-wise over its m configurations (default: all of them)."""
    m = m or len(configs)
    return [decide(c, alpha=alpha, m=m, threshold=threshold, anytime=anytime) for c in configs]


def should_stop(decision: ConfigDecision) -> bool:
    """In anytime mode an arm may stop once FAILS (or VOID) is certain; NOT_REJECTED needs the budget."""
    return decision.decision in (FAILS, VOID)
