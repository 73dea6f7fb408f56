"""Merging and deciding: an arm from its shards, and a config decided from the finished jobs in a
campaign folder (at an anytime look, or whole)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from badc_check.campaign.plan import Job
from badc_check.campaign.spec import Campaign, CampaignError
from badc_check.channels import RecordArm
from badc_check.confirmation import bounds_for_confirmation, confirm_repair, recurrence, recurs
from badc_check.decide import INCONCLUSIVE, Arm, Config, ConfigDecision, decide, should_stop
from badc_check.delta_b import WeightedRewards, delta_b, unweighted
from badc_check.looks import Look, planned_looks
from badc_replay.contract import merge_contracts
from badc_replay.registry import get_engine
from badc_replay.results import LawsResult, ResultError, ShardResult, read_result


@dataclass
class MergedArm:
    """One arm of a config, merged from its shards."""

    outcomes: dict[str, int]
    draws: int
    proposed: int
    accepted: int
    violations: int  # draws whose trace replay found a contract violation
    contract: dict[str, Any]  # merge_contracts' summary
    records: dict[str, Any] | None  # channel R counts, or None when the arm returned no records


def merge_shards(shards: list[dict[str, Any]]) -> MergedArm:
    """One arm from its shards: counts add up; the first violation is the earliest draw's."""
    outcomes: dict[str, int] = {}
    total = {"proposed": 0, "accepted": 0, "violations": 0, "draws": 0}
    records: dict[str, Any] | None = None
    weights_known = True  # every shard summed Delta B's weighted rewards (an older shard has none)
    shards = sorted(shards, key=lambda s: s["start"])
    for s in shards:
        if s["start"] != total["draws"]:  # shards must tile 0..n: never a draw twice, never a gap
            raise CampaignError(f"shard {s.get('arm', '')}-{s['start']} does not start at draw {total['draws']:,}: "
                                "shards of different sizes were mixed in one output folder")
        for y, k in s["outcomes"].items():
            outcomes[y] = outcomes.get(y, 0) + k
        for key in ("proposed", "accepted", "violations"):
            total[key] += s[key]
        total["draws"] += s["count"]
        r = s.get("records")
        weights_known = weights_known and r is not None and "weighted_reward" in r
        if r is not None:
            records = records or {"draws": 0, "mismatch": 0, "positions": {}, "first_mismatch": None}
            records["draws"] += r["draws"]
            records["mismatch"] += r["mismatch"]
            for p, k in r["positions"].items():
                records["positions"][str(p)] = records["positions"].get(str(p), 0) + k
            records["first_mismatch"] = records["first_mismatch"] or r.get("first_mismatch")
            if "weighted_reward" in r:
                w = records.setdefault("weighted_reward", {"sum": 0.0, "masked": 0})
                w["sum"] += r["weighted_reward"]["sum"]
                w["masked"] += r["weighted_reward"]["masked"]
    if records is not None and not weights_known:
        records.pop("weighted_reward", None)  # the weights are not known for every draw
    contract = merge_contracts([(s["start"], s.get("contract") or {}) for s in shards])
    return MergedArm(outcomes=outcomes, **total, contract=contract, records=records)


def _decision_config(config: dict[str, Any], laws: dict[str, Any], arms: dict[str, MergedArm]) -> Config:
    """The decision's view of a config: its discovery arms, laws, predicates and hypothesis."""
    hyp = laws.get("hypothesis")
    on, off = arms["on"], arms["off"]

    def record_arm(a: MergedArm) -> RecordArm | None:
        r = a.records
        return None if r is None else RecordArm(r["draws"], r["mismatch"],
                                                {int(k): v for k, v in r["positions"].items()})

    rec_on, rec_off = record_arm(on), record_arm(off)
    return Config(
        id=config["id"], engine=config["engine"], build=laws.get("build", config["build"]),
        role=config.get("role", "probe"), on=Arm(on.outcomes, on.violations, on.proposed, on.accepted),
        off=Arm(off.outcomes, off.violations), reference=laws["reference"], predicates=_predicates(config, laws),
        hypothesis=(hyp["id"], hyp["law"]) if hyp else None,
        records_status="complete" if rec_on and rec_off else "not_returned", records_on=rec_on, records_off=rec_off,
        contract={**on.contract, "off": off.contract}, pilot=(laws.get("pilot") or {}).get("outcomes"))


def _predicates(config: dict[str, Any], laws: dict[str, Any]) -> dict[str, frozenset[str]]:
    return {name: frozenset(laws.get("predicates", {}).get(name, ())) for name in config.get("predicates", [])}


def _frozen(laws: dict[str, Any], d: ConfigDecision) -> list[str]:
    """The events a confirmation bounds: A_H of the config's hypothesis, else discovery's crash-free argmax."""
    hyp = laws.get("hypothesis")
    return [f"A_H({hyp['id']})"] if hyp else [d.channel_s.argmax_crash_free]


def decide_config(config: dict[str, Any], laws: dict[str, Any], arms: dict[str, MergedArm],
                  campaign: Campaign, m: int, look: Look | None = None,
                  confirm_look: Look | None = None) -> ConfigDecision:
    """The decision from merged arms; at an anytime `look`, with that look's share of the budget. With the
    confirmation arms (and under confirm_anytime the look their recurrence is judged at, with "on-confirm"
    that look's prefix and "off-confirm-prefix" the off arm's), the repair's confirmation too."""
    cfg = _decision_config(config, laws, arms)
    d = decide(cfg, alpha=campaign.alpha, m=m, threshold=campaign.threshold,
               spend=1.0 if look is None else look.spend)
    if look is not None:
        d = dataclasses.replace(d, look=look.to_dict())
    if "repaired" in arms:
        prefix = arms.get("off-confirm-prefix")
        r = confirm_repair(config["repair"], cfg.family(), _frozen(laws, d), laws["reference"], cfg.predicates,
                           arms["off-confirm"].outcomes, arms["on-confirm"].outcomes,
                           arms["repaired"].outcomes, proposed_on=arms["on-confirm"].proposed,
                           proposed_repaired=arms["repaired"].proposed, alpha=campaign.alpha,
                           m=campaign.confirm_m, look=confirm_look, off_prefix=prefix and prefix.outcomes)
        on_w, off_w = rewards(arms["on-confirm"]), rewards(arms["off-confirm"])
        db = ({"unavailable": "the confirmation arms returned records whose importance weights are not known for "
                              "every draw (shards from before badc recorded them)"} if on_w is None or off_w is None
              else delta_b(on_w, off_w, campaign.alpha / campaign.confirm_m, laws["reference"]).to_dict())
        c = arms["repaired"].contract
        contract = {k: c[k] for k in ("status", "calls", "violations", "requests", "violating_requests",
                                      "first_violation", "left_unchecked")}
        d = dataclasses.replace(d, repair=dataclasses.replace(r, delta_b=db, contract=contract))
    return d


def rewards(arm: MergedArm) -> WeightedRewards | None:
    """An arm's weighted rewards for Delta B: every weight one when the engine returned no records; from
    the records when every draw's weight is known; else None (not known: never taken as one)."""
    if arm.records is None:
        return unweighted(arm.outcomes)
    w = arm.records.get("weighted_reward")
    if w is None or arm.records["draws"] != arm.draws:
        return None
    return WeightedRewards(arm.draws, w["sum"], w["masked"], "records")


def inconclusive(config: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"id": config["id"], "engine": config["engine"], "build": config["build"],
            "role": config.get("role", "probe"), "decision": INCONCLUSIVE, "eligible": False, "D": None,
            "witnesses": 0, "draws": {"on": 0, "off": 0}, "crashes": {"on": 0, "off": 0},
            "exercise": {"proposed": None, "accepted": None}, "calibration": {"passed": None}, "hypothesis": None,
            "records": {"status": "incomplete", "failed": False}, "repair": None, "contract": None,
            "applied": config.get("applied", []), "reasons": [reason]}



@dataclass
class FolderDecision:
    """One config decided from the finished jobs in a campaign folder."""

    decision: ConfigDecision
    laws: dict[str, Any]  # the laws job's output, with the registered predicates' outcome sets added
    arms: dict[str, MergedArm]  # each arm merged from its shards
    resumed: int  # draws the shards took over from checkpoints of cut-off runs
    jobs: list[Job] = field(default_factory=list)  # the jobs it was decided from
    look: Look | None = None  # the anytime look it was decided at


def decide_from_folder(config: dict[str, Any], jobs: list[Job], out: Path, campaign: Campaign, m: int,
                       arms: tuple[str, ...] | None = None, look: Look | None = None,
                       confirm_look: Look | None = None) -> FolderDecision:
    """Decide `config` from its jobs' outputs in `out` (every job of the chosen arms must be done).
    `arms` limits the arms read: ("on", "off") decides a config before its repair-confirmation arms
    are done, without the repair result. `look`: an anytime look, decided with its share of the budget.
    `confirm_look`: under confirm_anytime, the look at which the unrepaired arm's recurrence is judged
    (the jobs hold its on-confirm shards up to that look; confirmation_reads)."""
    laws = _read(jobs[0].output(out), LawsResult)
    shards: dict[str, list[dict[str, Any]]] = {}
    for j in jobs[1:]:
        if arms is None or j.arm in arms:
            shards.setdefault(j.arm, []).append(_read(j.output(out), ShardResult))
    merged = {arm: merge_shards(s) for arm, s in shards.items()}
    if confirm_look is not None and "off-confirm" in shards:
        at = confirm_look.draws
        merged["off-confirm-prefix"] = merge_shards([s for s in shards["off-confirm"] if s["start"] < at])
    if config.get("predicates"):
        laws["predicates"] = _predicate_sets(config, laws, merged)
    return FolderDecision(decision=decide_config(config, laws, merged, campaign, m, look, confirm_look), laws=laws,
                          arms=merged, resumed=sum(s.get("resumed", 0) for arm in shards.values() for s in arm),
                          jobs=[jobs[0], *(j for j in jobs[1:] if arms is None or j.arm in arms)], look=look)


def confirmation_reads(found: FolderDecision, conf_jobs: list[Job], out: Path,
                       campaign: Campaign) -> tuple[list[Job], Look | None] | None:
    """The confirmation jobs a config's repair result reads, and the look its recurrence is judged at.
    At fixed n: every job, no look. Under confirm_anytime: the off-confirm and repaired arms whole, and
    the on-confirm arm up to the first planned look at which it recurs on the prefixes of both fresh
    unrepaired arms (the last look if none does), so its later shards are not needed; None while the
    shards written decide no look. The looks take contiguous prefixes, so the answer does not depend on
    which shards finished first."""
    if not campaign.confirm_anytime:
        return conf_jobs, None
    config, laws = found.jobs[0].config, found.laws
    frozen = _frozen(laws, found.decision)
    for look in planned_looks(campaign.confirm_draws):
        prefix = [j for j in conf_jobs if j.arm in ("off-confirm", "on-confirm") and j.start < look.draws]
        if any(not j.output(out).exists() for j in prefix):
            return None
        arms = {arm: merge_shards([_read(j.output(out), ShardResult) for j in prefix if j.arm == arm])
                for arm in ("off-confirm", "on-confirm")}
        if config.get("predicates"):  # the contract-violation event must know every violating outcome counted
            laws = {**laws, "predicates": _predicate_sets(config, laws, {**found.arms, **arms})}
        cfg = _decision_config(config, laws, found.arms)
        family = cfg.family()
        tail = campaign.alpha / (campaign.confirm_m * bounds_for_confirmation(family, frozen, looks=True))
        rec, witnesses = recurrence(family, frozen, arms["off-confirm"].outcomes, arms["on-confirm"].outcomes,
                                    tail * look.spend, laws["reference"], cfg.predicates)
        if look.index == look.of or recurs(rec, witnesses):
            return [j for j in conf_jobs if j.arm != "on-confirm" or j.start < look.draws], look
    return None


def _read(path: Path, kind: type[LawsResult] | type[ShardResult]) -> dict[str, Any]:
    try:
        return read_result(path, kind)
    except ResultError as e:
        raise CampaignError(f"{e} (delete the file and run again to redo that job)") from None


def anytime_decision(config: dict[str, Any], jobs: list[Job], out: Path, campaign: Campaign,
                     m: int) -> FolderDecision | None:
    """`badc run --anytime`: the decision at the first planned look that stops (FAILS or VOID), else at the
    last look; None while the finished shards allow neither. Looks take contiguous prefixes of both arms,
    so the decision does not depend on which shards finished first."""
    if not jobs[0].output(out).exists():
        return None
    for look in planned_looks(campaign.draws):
        prefix = [j for j in jobs[1:] if j.arm in ("on", "off") and j.start < look.draws]
        if any(not j.output(out).exists() for j in prefix):
            return None
        found = decide_from_folder(config, [jobs[0], *prefix], out, campaign, m, look=look)
        if look.index == look.of or should_stop(found.decision):
            return found
    return None


def _predicate_sets(config: dict[str, Any], laws: dict[str, Any],
                    arms: dict[str, MergedArm]) -> dict[str, list[str]]:
    """Registered predicates as lists of the violating outcomes among all the laws and arms contain
    (predicates are pure functions of outcome strings; the engine module defines them)."""
    engine = get_engine(config["engine"])
    cfg = engine.parse_config(config)
    known = set(laws["reference"] or ()) | set(laws.get("hypothesis", {}).get("law", {}))
    for arm in arms.values():
        known |= set(arm.outcomes)
    return {name: sorted(y for y in known if engine.predicate(name, cfg)(y)) for name in config["predicates"]}
