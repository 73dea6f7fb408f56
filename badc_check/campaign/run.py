"""`badc run`: seal a campaign, run its jobs, decide, confirm repairs, and write the report.

A configuration's work is split into jobs: its exact laws, then shards of draws per arm. A job's result
is a file written atomically; a job whose file exists is never run again, and a shard that was cut off
goes on from its last checkpoint (every 30 s). So a worker that dies, an engine that crashes the
process, or an interrupted campaign loses at most the last half-minute of each shard in flight, and
running the same command again completes the sealed roster (each draw's seed is a function of the
campaign seed, config, arm and index). Configs whose build is not declared or not set up are reported
INCONCLUSIVE with the reason, never dropped.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from badc_check.builds import build_for
from badc_check.campaign.executors import Executor, WarmWorkers, stall_limit
from badc_check.campaign.merge import (
    FolderDecision,
    MergedArm,
    anytime_decision,
    confirmation_reads,
    decide_from_folder,
    inconclusive,
)
from badc_check.campaign.plan import Chain, Job, confirmation_jobs, discovery_jobs, exact_job
from badc_check.campaign.progress import Progress
from badc_check.campaign.report import report_markdown
from badc_check.campaign.result import ABSENT, CampaignReport
from badc_check.campaign.seal import check_seal, write_json
from badc_check.campaign.spec import Campaign, CampaignError
from badc_check.campaign.validate import validate_native
from badc_check.campaign.watch import LookWatcher, RecurrenceWatcher, StopWatcher
from badc_check.comparator import comparator_report
from badc_check.confirmation import WITNESS_LIMIT, not_attempted
from badc_check.decide import INCONCLUSIVE, ConfigDecision, event_family
from badc_check.exact import exact_report, sampled_against_mu
from badc_check.looks import planned_looks
from badc_check.marginals import marginal_study
from badc_check.selection import Selection, joined, select_confirmations, without_hypothesis_events
from badc_replay.arms import checkpoint_interval
from badc_replay.exact import UNSUPPORTED
from badc_replay.registry import get_engine
from badc_replay.results import ExactResult, ResultError, read_result
from badc_trace.files import write_atomic

RETRIES = 2  # a failed job is re-run this many times before its config is given up


def other_tests(folder: FolderDecision, decision: str, alpha: float) -> dict[str, Any]:
    """Beside badc's decision (#27): the permutation chi-square comparator C on full outputs at alpha / m,
    and the complete marginal TV bounds of the on arm (and the repaired arm) against the off arm."""
    arms = folder.arms
    others = {"on/off": arms["on"].outcomes}
    if "repaired" in arms:
        others["repaired/off"] = arms["repaired"].outcomes
    return {"comparator": comparator_report(arms["on"].outcomes, arms["off"].outcomes, alpha, decision),
            "marginals": marginal_study(arms["off"].outcomes, others, alpha).to_dict()}


def hold_folder(out: Path) -> IO[str]:
    """An exclusive lock on the campaign folder for this process's lifetime (the kernel drops it when the
    process ends, crashed or not): a second `badc run` on the same folder would run every job twice and
    write the same files from two processes."""
    f = (out / ".lock").open("a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        pid = (out / "RUNNING").read_text().strip() if (out / "RUNNING").exists() else "unknown"
        raise CampaignError(f"{out} is being run by another badc run (pid {pid}): wait for it to end, or give "
                            "another --out") from None
    return f


def run_campaign(campaign: Campaign, out: str | Path, *, workers: int = 2, executor: str = "local",
                 log: Callable[[str], None] | None = None, plots: bool = True, partial: bool = False,
                 only: list[str] | None = None) -> CampaignReport:
    """Run the sealed roster's missing jobs, then decide every config. With `partial`, run nothing:
    decide the configs whose jobs are all done (with the whole roster's m, so their bounds are the
    final ones), list the others as pending, and write report-partial.json and .md. With `only`, run
    just those configs' jobs (the roster, its seal and m stay whole, so the draws and bounds are the
    ones a full run gives) and write the partial report, or the full one once every job is done.

    The stages, in order, each over one `CampaignRun`: `plan` (jobs per config, and which run here),
    `exact` (the exact channel, first: seconds per config, and beside the draws it never changes a
    decision), `draw` (discovery: laws, off and on arms), `decide`, `select` (the configs to confirm:
    badc_check/selection.py, one eligible, calibrated, compatible FAILS per cause and build, by sealed
    priority), `confirm` (their confirmation arms, and each config's row) and `report`."""
    with WarmWorkers() as warm:  # validation's workers, each kept for its build's first job
        run = start(campaign, Path(out), workers=workers, executor=executor, log=log, partial=partial, only=only,
                    warm=warm if executor == "local" else None)
        plan(run)
        exact(run)
        if campaign.exact != "only":
            draw(run)
            decide(run)
            select(run)
            confirm(run)
        return report(run, plots=plots)


@dataclass
class CampaignRun:
    """One `badc run` from its start to its report: what each stage reads and what it leaves for the next
    (the fields below the first block are each filled by the stage named beside them)."""

    campaign: Campaign
    out: Path
    partial: bool
    only: list[str] | None
    log: Callable[[str], None]
    executor: Executor
    progress: Progress
    seal: dict[str, Any]
    marker: Path  # OUT/RUNNING while a run is in progress
    interrupted_before: bool  # an earlier run left its marker
    refused: dict[str, str]  # config id -> the engine's message: it will not run it with speculation
    lock: IO[str]  # held until this run ends, however it ends
    started: float = field(default_factory=time.monotonic)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # report rows (plan: refused; confirm)
    plans: dict[str, list[Job]] = field(default_factory=dict)  # plan: each config's discovery jobs
    pythons: dict[str, str] = field(default_factory=dict)  # plan: the interpreter of each config's build
    unbuilt: dict[str, str] = field(default_factory=dict)  # plan: config id -> why its build cannot run here
    chosen: set[str] = field(default_factory=set)  # plan: the configs this run runs
    exact: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # exact: report.json's `exact`
    exact_laws: dict[str, Any] = field(default_factory=dict)  # exact: the worker's laws, for the arm against mu
    reused: int = 0  # draw, confirm: jobs whose files an earlier run left
    incomplete: bool = False  # decide: the report is partial (asked for, or --only left other configs' jobs)
    found: dict[str, FolderDecision] = field(default_factory=dict)  # decide: discovery decisions
    selection: Selection = field(default_factory=lambda: Selection(attempts=()))  # select
    confirm: dict[str, list[Job]] = field(default_factory=dict)  # select: confirmation jobs per config
    decided: dict[str, tuple[dict[str, Any], dict[str, MergedArm]]] = field(default_factory=dict)  # confirm
    pending: list[dict[str, Any]] = field(default_factory=list)  # confirm: configs not decided yet
    resumed: int = 0  # confirm: draws that shards took over from checkpoints of cut-off runs

    def missing(self, jobs: list[Job]) -> list[Job]:
        return [j for j in jobs if not j.output(self.out).exists()]

    def failed(self, cid: str, jobs: list[Job]) -> str | None:
        """Why `jobs` are not done, when this run tried them RETRIES + 1 times."""
        left = self.missing(jobs)
        return (f"{len(left)} job(s) failed after {RETRIES + 1} attempts (first: {left[0].label})"
                if left and not self.partial and cid in self.chosen else None)

    def grouped(self, jobs: list[Job]) -> list[Job | Chain]:
        """Laws or exact-channel jobs of configs on one build and model share a worker (one engine start);
        with fewer groups than workers, the largest is halved until every worker has one."""
        left: dict[tuple[str, str], list[Job]] = {}
        for j in jobs:
            left.setdefault((self.pythons[j.cid], str(j.config.get("model"))), []).append(j)
        groups = list(left.values())
        while len(groups) < self.executor.workers and max(map(len, groups), default=0) > 1:
            big = max(groups, key=len)
            groups.remove(big)
            groups += [big[::2], big[1::2]]
        return [group[0] if len(group) == 1 else Chain(group) for group in groups]

    def run_jobs(self, todo: Callable[[], list[Job | Chain]],
                 skip: Callable[[Job | Chain], bool] = lambda job: False) -> None:
        """The jobs `todo()` names, then again those it still names (failed ones), RETRIES times at most."""
        out, seed, seal = self.out, self.campaign.seed, self.seal["seal"]
        for attempt in range(RETRIES + 1):
            left = todo()
            if not left:
                return
            if attempt:
                self.log(f"retrying {len(left)} failed job(s) (attempt {attempt + 1})")
            self.executor.run([(j, j.command(self.pythons[j.cid], out / "configs" / f"{j.cid}.json", out, seed, seal))
                               for j in left], out, seed, seal, skip=skip)

    def run_arms(self, jobs: dict[str, list[Job]],
                 watcher: Callable[[dict[str, list[Job]]], StopWatcher] | None = None) -> None:
        """Laws queued first (a config without its laws cannot be decided), then every shard, retried on
        failure.
        With a `watcher` (discovery under --anytime, confirmation under confirm_anytime), each arm's
        shards, one per look, run in turn in one worker process, and the arms the watcher stops (a config
        a look decided, an unrepaired arm a look showed recurring) begin no more of them."""
        out, progress = self.out, self.progress
        self.reused += sum(1 for js in jobs.values() for j in js if j.output(out).exists())
        for cid, js in jobs.items():  # so the progress and time left are this run's
            for j in js if cid in self.chosen else ():
                if j.count:  # shards, and the pilot of a model without an exact law
                    progress.totals[(cid, j.arm)] = progress.totals.get((cid, j.arm), 0) + j.count
                    if j.output(out).exists():
                        progress.done[(cid, j.arm)] = progress.done.get((cid, j.arm), 0) + j.count
                        progress.timed(j.output(out))
        if self.partial:
            return
        wanted = {cid: js for cid, js in jobs.items() if cid in self.chosen}

        def laws() -> list[Job | Chain]:
            """Queued first; shards follow without waiting for the last of them."""
            return self.grouped([js[0] for js in wanted.values()
                                 if js[0].kind == "laws" and not js[0].count and not js[0].output(out).exists()])
        # a sealed pilot (a model without an exact law) is drawn before any decision draw, as documented
        self.run_jobs(lambda: [j for js in wanted.values() for j in js
                               if j.kind == "laws" and j.count and not j.output(out).exists()])
        if watcher is None:
            self.run_jobs(lambda: [*laws(), *(j for js in wanted.values() for j in js
                                              if j.kind == "shard" and not j.output(out).exists())])
            return
        # each arm's shards (one per look) in one worker process, a config's arms side by side; the watcher
        # decides each look as its shards land and stops the chains it no longer needs
        with watcher(wanted) as watch:
            def chains() -> list[Job | Chain]:
                made: list[Job | Chain] = laws()
                for cid, js in wanted.items():
                    for arm in dict.fromkeys(j.arm for j in js if j.kind == "shard"):
                        left = [j for j in js if j.kind == "shard" and j.arm == arm and not j.output(out).exists()]
                        if left and not watch.stops(left[0]):
                            made.append(Chain(left, watch.stop_file(cid) if arm in watch.arms else None))
                return made
            self.run_jobs(chains, skip=watch.stops)


def start(campaign: Campaign, out: Path, *, workers: int, executor: str, log: Callable[[str], None] | None,
          partial: bool, only: list[str] | None, warm: WarmWorkers | None) -> CampaignRun:
    """Check what the command asks before anything is sealed or run (engine-native keys judged by each
    build), then hold the folder, seal it (or check the seal an earlier run left) and mark the run."""
    if partial and not (out / "seal.json").exists():
        raise CampaignError(f"{out} holds no sealed campaign to report on")
    if only is not None:
        unknown = sorted(set(only) - {c["id"] for c in campaign.configs})
        if unknown or not only:
            ids = ", ".join(c["id"] for c in campaign.configs)
            raise CampaignError(f"--only: {', '.join(unknown) + ' not' if unknown else 'names no config'} in "
                                f"campaign {campaign.name!r} (its configs: {ids})")
    try:  # the workers read it: refuse a bad value here, before any of them starts
        checkpoint_interval()
    except ValueError as e:
        raise CampaignError(str(e)) from None
    stall_limit()
    refused = {} if partial else validate_native(campaign, executor, warm)
    out.mkdir(parents=True, exist_ok=True)
    lock = hold_folder(out)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    seal = check_seal(campaign, out)
    needed = campaign.confirm_draws_needed
    if needed and not partial:
        log(f"badc run: warning: {campaign.confirm_draws:,} draws per confirmation arm cannot confirm any repair "
            f"(a repaired arm without a single witness still bounds its witness rate above {WITNESS_LIMIT:g} at "
            f"alpha {campaign.alpha} over m = {campaign.confirm_m}); {needed:,} can. Stage S3 still runs, and "
            "every repair it attempts will be reported not confirmed.")
    marker = out / "RUNNING"
    interrupted_before = marker.exists()
    if not partial:
        if interrupted_before:
            log(f"{out}: an earlier run was interrupted; completing its sealed roster")
        marker.write_text(str(os.getpid()))
    progress = Progress(log=log, engines={c["id"]: f"{c['engine']}-{c['build']}" for c in campaign.configs})
    return CampaignRun(campaign=campaign, out=out, partial=partial, only=only, log=log,
                       executor=Executor(executor, workers, progress, log, warm), progress=progress, seal=seal,
                       marker=marker, interrupted_before=interrupted_before, refused=refused, lock=lock)


def plan(run: CampaignRun) -> None:
    """Each config's discovery jobs and its build's interpreter; a config its engine refused is reported
    INCONCLUSIVE and planned nothing, one whose build is not here runs nothing (what earlier runs left
    elsewhere still decides it)."""
    campaign, out = run.campaign, run.out
    for c in campaign.configs:
        try:
            inline = run.executor.kind == "inline"
            run.pythons[c["id"]] = sys.executable if inline else str(build_for(c["engine"], c["build"]).python)
        except LookupError as e:
            run.unbuilt[c["id"]] = str(e)
        if c["id"] in run.refused:  # a documented limitation of the engine: reported, never drawn or decided
            run.results[c["id"]] = {**inconclusive(c, f"refused by {c['engine']} {c['build']} with speculation on: "
                                                      f"{run.refused[c['id']]} (a limitation of the engine, not a "
                                                      "pass)"), "refused": run.refused[c["id"]]}
            continue
        run.plans[c["id"]] = discovery_jobs(campaign, c)
        if not run.partial:
            cfg_path = out / "configs" / f"{c['id']}.json"
            cfg_path.parent.mkdir(exist_ok=True)
            write_json(cfg_path, c)
    run.chosen = {cid for cid in run.plans if run.only is None or cid in run.only} - set(run.unbuilt)


def exact(run: CampaignRun) -> None:
    """The exact channel of every planned config (with `exact` on), each logged as it is read."""
    campaign, out = run.campaign, run.out
    if campaign.exact == "off":
        return
    jobs = {cid: exact_job(campaign, js[0].config) for cid, js in run.plans.items()}
    if not run.partial:
        run.run_jobs(lambda: run.grouped([j for cid, j in jobs.items()
                                          if cid in run.chosen and not j.output(out).exists()]))
    for cid, j in jobs.items():
        why = run.unbuilt.get(cid) or (None if run.partial or cid not in run.chosen else
                                       f"not computed: its worker failed {RETRIES + 1} times (see the log above)")
        run.exact[cid] = e = _exact(j, out, campaign, why, run.exact_laws)
        if e is not None:
            run.log(f"{cid}: exact {e['status']}" + (f" (TV {e['tv']:.3g}, {e['paths']:,} paths)"
                                                     if e["tv"] is not None else f": {e['reason']}"))


def draw(run: CampaignRun) -> None:
    """Discovery: every config's laws, off and on arms (under --anytime, look by look)."""
    campaign = run.campaign
    run.run_arms(run.plans, (lambda jobs: LookWatcher(jobs, run.out, campaign, campaign.m, run.log,
                                                      on_stop=run.progress.settle)) if campaign.anytime else None)


def decide(run: CampaignRun) -> None:
    """Each config's discovery decision from its folder (anytime: a config decided at an early look needs
    none of its later shards)."""
    campaign = run.campaign
    run.incomplete = run.partial
    for cid, jobs in run.plans.items():
        got = anytime_decision(jobs[0].config, jobs, run.out, campaign, campaign.m) if campaign.anytime else \
            None if run.missing(jobs) else decide_from_folder(jobs[0].config, jobs, run.out, campaign, campaign.m)
        if got is not None:
            run.found[cid] = got
    if run.only is not None and not run.partial:
        if not run.interrupted_before:  # this run was not cut off; an earlier one's mark stays for the final report
            run.marker.unlink(missing_ok=True)
        # a config whose build is not set up here and whose jobs are not all done is INCONCLUSIVE, as in a whole run
        run.incomplete = any(cid not in run.found for cid in run.plans if cid not in run.unbuilt)


def select(run: CampaignRun) -> None:
    """Stage S3's choice: the configs whose repairs get confirmation arms, and those arms' jobs."""
    campaign = run.campaign
    states: dict[str, ConfigDecision | str | None] = {cid: r["decision"] for cid, r in run.results.items()}
    states.update({cid: run.found[cid].decision if cid in run.found else None if run.incomplete else INCONCLUSIVE
                   for cid in run.plans})
    run.selection = select_confirmations(campaign.configs, states)
    if campaign.confirm_without_hypothesis_events:  # RQ3's other cell: what the decisions without A_H select
        run.selection = joined(campaign.configs, run.selection,
                               select_confirmations(campaign.configs, without_hypothesis_events(states)))
    confirm = {cid: confirmation_jobs(campaign, run.plans[cid][0].config) for cid in run.selection.attempts}
    run.confirm = {cid: jobs for cid, jobs in confirm.items() if jobs}


def confirm(run: CampaignRun) -> None:
    """The selected configs' confirmation arms, then each config's row: decided (its repair confirmed or
    not from those arms), INCONCLUSIVE with the reason, or pending in a partial report."""
    campaign, out, m = run.campaign, run.out, run.campaign.m
    if run.confirm:
        run.run_arms(run.confirm, (lambda jobs: RecurrenceWatcher(jobs, run.found, out, campaign, run.log,
                                                                  on_stop=run.progress.settle))
                     if campaign.confirm_anytime else None)
    # what each repair result reads: under confirm_anytime, the unrepaired arm up to the look that recurred
    reads = {cid: (confirmation_reads(run.found[cid], jobs, out, campaign) if cid in run.found else None)
             or (jobs, None) for cid, jobs in run.confirm.items()}
    if run.confirm and run.only is not None and not run.partial:
        run.incomplete = run.incomplete or any(run.missing(jobs) for jobs, _ in reads.values())
    waiting = set(run.selection.pending) if campaign.confirm_draws else set()  # their group is not decided yet
    for cid, jobs in run.plans.items():
        config = jobs[0].config
        conf_jobs = run.confirm.get(cid, [])
        conf_reads, recurred = reads.get(cid, ([], None))
        left = ([] if cid in run.found else run.missing(jobs)) + run.missing(conf_reads)
        why = (run.unbuilt.get(cid) or run.failed(cid, jobs + conf_reads)) if left else None
        if (left or cid in waiting) and run.incomplete:
            arms_done: dict[str, list[int]] = {}
            for j in jobs[1:] + conf_jobs:
                done_total = arms_done.setdefault(j.arm, [0, 0])
                done_total[0] += j.count if j.output(out).exists() else 0
                done_total[1] += j.count
            row: dict[str, Any] = {"id": cid, "laws": jobs[0].output(out).exists(), "failed": why,
                                   "draws": {arm: f"{d:,}/{t:,}" for arm, (d, t) in arms_done.items()}}
            if recurred is not None and recurred.index < recurred.of:  # its unrepaired arm needs no more draws
                row["draws"]["on-confirm"] += f" (enough: it recurs at {recurred})"
            if cid in waiting and not left:
                row["waiting"] = "its confirmation is selected once every config of its build is decided"
            if cid in run.found:  # its discovery is decided; only its confirmation is not done (or not selected)
                f = run.found[cid]
                at = f" at {f.look}" if f.look else ""
                row["discovery"] = f"{f.decision.decision}{at}, D {f.decision.D:.4f}"
            run.pending.append(row)
            if why and cid not in run.unbuilt:  # not decided: the next run retries them, so it is listed as pending
                run.log(f"{cid}: {why}; still pending, the next run retries them")
            continue
        if cid not in run.found:  # a whole run: every missing job was tried RETRIES + 1 times, so `why` is set
            run.results[cid] = inconclusive(config, str(why))
            continue
        folder = run.found[cid]
        if conf_reads and not run.missing(conf_reads):
            folder = decide_from_folder(config, folder.jobs + conf_reads, out, campaign, m, look=folder.look,
                                        confirm_look=recurred)
        d = folder.decision
        if conf_reads and run.missing(conf_reads):
            d = dataclasses.replace(d, repair=not_attempted(config["repair"], f"confirmation jobs failed: {why}"))
        elif cid in run.selection.not_attempted and campaign.confirm_draws:
            d = dataclasses.replace(d, repair=not_attempted(config["repair"], run.selection.not_attempted[cid]))
        run.resumed += folder.resumed
        run.decided[cid] = (folder.laws, folder.arms)
        run.results[cid] = {**d.to_dict(), "applied": config.get("applied", []), **_variant(config),
                            **_exact_beside(run.exact.get(cid), run.exact_laws.get(cid), folder, campaign, m),
                            "simulator_check": folder.laws.get("simulator_check"),
                            "simulator_metric": folder.laws.get("simulator_metric"),
                            "records_detail": {arm: folder.arms[arm].records for arm in ("on", "off")},
                            **other_tests(folder, d.decision, campaign.alpha / m)}
        run.log(f"{cid}: {d.decision} (D {d.D:.4f}, witnesses {d.witnesses.count}, contract "
                f"{(d.contract or {}).get('status', 'unchecked')})")


def report(run: CampaignRun, plots: bool = True) -> CampaignReport:
    """The campaign's report, written to report.json and report.md (report-partial.* while configs are
    pending), with plots of a complete one."""
    campaign = run.campaign
    got = _exact_only_report(run) if campaign.exact == "only" else _full_report(run)
    if got.complete and not (campaign.exact == "only" and run.partial):
        run.marker.unlink(missing_ok=True)
    write_json(run.out / f"{got.name}.json", got.to_dict())
    write_atomic(run.out / f"{got.name}.md", report_markdown(got))
    if plots and got.complete and campaign.exact != "only":
        from badc_check.plots import plot_campaign

        plot_campaign(run.out, got, run.decided)
    return got


def _full_report(run: CampaignRun) -> CampaignReport:
    campaign = run.campaign
    for cid, r in run.results.items():  # configs not decided (not built, refused, failed) keep their exact channel
        if run.exact.get(cid) is not None and "exact" not in r:
            r["exact"] = run.exact[cid]
    jobs = [j for js in [*run.plans.values(), *run.confirm.values()] for j in js]
    provenance = _shard_provenance(jobs, run.out)
    if len(drawing := {**provenance["code_versions"], **provenance["laws_code_versions"]}) > 1:
        run.log(f"the shards and laws were drawn by {len(drawing)} versions of badc's drawing code: see the report")
    return CampaignReport(
        campaign=campaign.name, seal=run.seal["seal"], alpha=campaign.alpha, threshold=campaign.threshold,
        m=campaign.m, exact_tol=campaign.exact_tol if run.exact else ABSENT, confirm_m=campaign.confirm_m,
        anytime=[look.to_dict() for look in planned_looks(campaign.draws)] if campaign.anytime else None,
        draws=campaign.draws, confirm_draws=campaign.confirm_draws,
        confirm_anytime=[look.to_dict() for look in planned_looks(campaign.confirm_draws)]
        if campaign.confirm_anytime else None,
        confirm_draws_needed=campaign.confirm_draws_needed, confirmation_attempts=tuple(run.selection.attempts),
        interrupted=run.interrupted_before, jobs_reused=run.reused, draws_resumed=run.resumed,
        elapsed_s=round(time.monotonic() - run.started, 1),
        worker_core_hours=provenance["worker_core_hours"], code_versions=provenance["code_versions"],
        laws_code_versions=provenance["laws_code_versions"],
        configs=tuple(run.results[c["id"]] for c in campaign.configs if c["id"] in run.results),
        pending=tuple(run.pending) if run.incomplete else ABSENT)


def _shard_provenance(jobs: list[Job], out: Path) -> dict[str, Any]:
    """What the finished shards cost their workers, earlier runs' included (`worker_core_hours`: elapsed
    core-hours, and CPU core-hours when every one of them recorded it, None otherwise: never a partial
    sum), and which versions of badc's drawing code drew them (`code_versions`: digest -> shards) and
    computed the laws files (`laws_code_versions`: digest -> laws files, pilots included); "unrecorded"
    for files written before badc recorded it."""
    import json
    from collections import Counter

    def done(kind: str) -> list[dict[str, Any]]:
        return [json.loads(j.output(out).read_text()) for j in jobs if j.kind == kind and j.output(out).exists()]

    def versions(results: list[dict[str, Any]]) -> dict[str, int]:
        return dict(sorted(Counter(d.get("code") or "unrecorded" for d in results).items()))

    shards = done("shard")
    cpu = [d.get("cpu_s") for d in shards]
    return {"worker_core_hours": {"elapsed": round(sum(d["elapsed_s"] for d in shards) / 3600, 3),
                                  "cpu": None if None in cpu else round(sum(cpu) / 3600, 3)},
            "code_versions": versions(shards), "laws_code_versions": versions(done("laws"))}


def _exact(job: Job, out: Path, campaign: Campaign, missing: str | None,
           laws: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """A config's exact channel as report.json gives it (its worker's laws kept in `laws`); None while its
    job has not run (--partial)."""
    path = job.output(out)
    if not path.exists():
        if missing is None:
            return None
        return exact_report(job.config, {"status": UNSUPPORTED, "reason": missing}, tol=campaign.exact_tol,
                            threshold=campaign.threshold, alpha=campaign.alpha, m=campaign.m).to_dict()
    try:
        res = read_result(path, ExactResult)
    except ResultError as e:
        raise CampaignError(f"{e} (delete the file and run again to redo that job)") from None
    laws[job.cid] = res
    config = job.config
    engine = get_engine(config["engine"])
    cfg = engine.parse_config(config)
    preds = {name: engine.predicate(name, cfg) for name in config.get("predicates", [])}
    return exact_report(config, res, tol=campaign.exact_tol, threshold=campaign.threshold, alpha=campaign.alpha,
                        m=campaign.m, predicates=preds, anytime=campaign.anytime).to_dict()


def _exact_beside(e: dict[str, Any] | None, res: dict[str, Any] | None, folder: FolderDecision,
                  campaign: Campaign, m: int) -> dict[str, Any]:
    """The exact channel beside a decided config, with its sampled on-arm tested against mu itself."""
    if e is None:
        return {}
    if res is not None and res.get("on") is not None:
        laws = folder.laws
        hyp = laws.get("hypothesis")
        family = event_family(laws["reference"], (hyp["id"], hyp["law"]) if hyp else None,
                              {k: frozenset(v) for k, v in laws.get("predicates", {}).items()})
        s = sampled_against_mu(res, folder.arms["on"].outcomes, family, campaign.alpha, m)
        if s is not None:
            e = {**e, "sampled_against_mu": {"rejected": s.rejected, "worst_event": s.worst_event,
                                             "zero_veto": list(s.zero_veto), "draws": s.draws}}
    return {"exact": e}


def _exact_only_report(run: CampaignRun) -> CampaignReport:
    """`--exact-only`: no draws; each config's exact channel is its row (decision None)."""
    campaign = run.campaign
    rows, pending = [], []
    for c in campaign.configs:
        e = run.exact.get(c["id"])
        if c["id"] in run.results:  # refused by the engine
            e = exact_report(c, {"status": UNSUPPORTED, "reason": "refused by the engine with speculation on: "
                                                                  + run.results[c["id"]]["refused"]},
                             tol=campaign.exact_tol, threshold=campaign.threshold, alpha=campaign.alpha,
                             m=campaign.m).to_dict()
        if e is None:
            pending.append({"id": c["id"], "laws": False, "failed": None, "draws": {}})
            continue
        rows.append({"id": c["id"], "engine": c["engine"], "build": c["build"], "role": c.get("role", "probe"),
                     "decision": None, "exact": e})
    return CampaignReport(campaign=campaign.name, seal=run.seal["seal"], alpha=campaign.alpha,
                          threshold=campaign.threshold, m=campaign.m, draws=0, exact_only=True,
                          exact_tol=campaign.exact_tol, elapsed_s=round(time.monotonic() - run.started, 1),
                          configs=tuple(rows), pending=tuple(pending) if pending else ABSENT)


def _variant(config: dict[str, Any]) -> dict[str, Any]:
    """For a config expanded from `variants`: which config it came from, and its model and prompt."""
    if not config.get("variant_of"):
        return {}
    return {"variant": {"of": config["variant_of"], **{k: config[k] for k in ("model", "prompt") if k in config}}}
