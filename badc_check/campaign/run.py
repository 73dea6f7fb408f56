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
from badc_check.selection import joined, select_confirmations, without_hypothesis_events
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
                 only: list[str] | None = None) -> dict[str, Any]:
    """Run the sealed roster's missing jobs, then decide every config. With `partial`, run nothing:
    decide the configs whose jobs are all done (with the whole roster's m, so their bounds are the
    final ones), list the others as pending, and write report-partial.json and .md. With `only`, run
    just those configs' jobs (the roster, its seal and m stay whole, so the draws and bounds are the
    ones a full run gives) and write the partial report, or the full one once every job is done.

    Discovery (laws, off and on arms) runs first; then the configs selected for confirmation
    (badc_check/selection.py: one eligible, calibrated, compatible FAILS per cause and build, by sealed
    priority) get their confirmation arms."""
    with WarmWorkers() as warm:  # validation's workers, each kept for its build's first job
        return _run_campaign(campaign, Path(out), workers=workers, executor=executor, log=log, plots=plots,
                             partial=partial, only=only, warm=warm if executor == "local" else None)


def _run_campaign(campaign: Campaign, out: Path, *, workers: int, executor: str, log: Callable[[str], None] | None,
                  plots: bool, partial: bool, only: list[str] | None, warm: WarmWorkers | None) -> dict[str, Any]:
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
    refused: dict[str, str] = {}  # config id -> the engine's message: it will not run it with speculation
    if not partial:  # engine-native keywords, judged by each build before anything is sealed
        refused = validate_native(campaign, executor, warm)
    out.mkdir(parents=True, exist_ok=True)
    _held = hold_folder(out)  # until this run ends, however it ends
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
    start = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    progress = Progress(log=log, engines={c["id"]: f"{c['engine']}-{c['build']}" for c in campaign.configs})
    plans: dict[str, list[Job]] = {}
    pythons: dict[str, str] = {}
    unbuilt: dict[str, str] = {}  # config id -> why its build cannot run here
    for c in campaign.configs:
        try:
            inline = executor == "inline"
            pythons[c["id"]] = sys.executable if inline else str(build_for(c["engine"], c["build"]).python)
        except LookupError as e:  # nothing of it runs here; what earlier runs (elsewhere) left still decides it
            unbuilt[c["id"]] = str(e)
        if c["id"] in refused:  # a documented limitation of the engine: reported, never drawn or decided
            results[c["id"]] = {**inconclusive(c, f"refused by {c['engine']} {c['build']} with speculation on: "
                                                  f"{refused[c['id']]} (a limitation of the engine, not a pass)"),
                                "refused": refused[c["id"]]}
            continue
        plans[c["id"]] = discovery_jobs(campaign, c)
        if not partial:
            cfg_path = out / "configs" / f"{c['id']}.json"
            cfg_path.parent.mkdir(exist_ok=True)
            write_json(cfg_path, c)
    chosen = {cid for cid in plans if only is None or cid in only} - set(unbuilt)  # what this run runs
    ex = Executor(executor, workers, progress, log, warm)

    def run(jobs: dict[str, list[Job]], watcher: Callable[[dict[str, list[Job]]], StopWatcher] | None = None) -> None:
        """Laws queued first (a config without its laws cannot be decided), then every shard, retried on
        failure.
        With a `watcher` (discovery under --anytime, confirmation under confirm_anytime), each arm's
        shards, one per look, run in turn in one worker process, and the arms the watcher stops (a config
        a look decided, an unrepaired arm a look showed recurring) begin no more of them."""
        for cid, js in jobs.items():  # so the progress and time left are this run's
            for j in js if cid in chosen else ():
                if j.count:  # shards, and the pilot of a model without an exact law
                    progress.totals[(cid, j.arm)] = progress.totals.get((cid, j.arm), 0) + j.count
                    if j.output(out).exists():
                        progress.done[(cid, j.arm)] = progress.done.get((cid, j.arm), 0) + j.count
                        progress.timed(j.output(out))
        if partial:
            return
        wanted = {cid: js for cid, js in jobs.items() if cid in chosen}

        def laws() -> list[Job | Chain]:
            """Queued first; shards follow without waiting for the last of them."""
            return grouped([js[0] for js in wanted.values()
                            if js[0].kind == "laws" and not js[0].count and not js[0].output(out).exists()])
        # a sealed pilot (a model without an exact law) is drawn before any decision draw, as documented
        run_jobs(lambda: [j for js in wanted.values() for j in js
                          if j.kind == "laws" and j.count and not j.output(out).exists()])
        if watcher is None:
            run_jobs(lambda: [*laws(), *(j for js in wanted.values() for j in js
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
            run_jobs(chains, skip=watch.stops)

    def grouped(jobs: list[Job]) -> list[Job | Chain]:
        """Laws or exact-channel jobs of configs on one build and model share a worker (one engine start);
        with fewer groups than workers, the largest is halved until every worker has one."""
        left: dict[tuple[str, str], list[Job]] = {}
        for j in jobs:
            left.setdefault((pythons[j.cid], str(j.config.get("model"))), []).append(j)
        groups = list(left.values())
        while len(groups) < ex.workers and max(map(len, groups), default=0) > 1:
            big = max(groups, key=len)
            groups.remove(big)
            groups += [big[::2], big[1::2]]
        return [group[0] if len(group) == 1 else Chain(group) for group in groups]

    def run_jobs(todo: Callable[[], list[Job | Chain]],
                 skip: Callable[[Job | Chain], bool] = lambda job: False) -> None:
        """The jobs `todo()` names, then again those it still names (failed ones), RETRIES times at most."""
        for attempt in range(RETRIES + 1):
            left = todo()
            if not left:
                return
            if attempt:
                log(f"retrying {len(left)} failed job(s) (attempt {attempt + 1})")
            ex.run([(j, j.command(pythons[j.cid], out / "configs" / f"{j.cid}.json", out, campaign.seed, seal["seal"]))
                    for j in left], out, campaign.seed, seal["seal"], skip=skip)

    # The exact channel first: seconds per config, and beside the draws it never changes a decision.
    exact_jobs = {cid: exact_job(campaign, jobs[0].config) for cid, jobs in plans.items()} \
        if campaign.exact != "off" else {}
    if exact_jobs and not partial:
        run_jobs(lambda: grouped([j for cid, j in exact_jobs.items() if cid in chosen and not j.output(out).exists()]))
    exact_laws: dict[str, dict[str, Any]] = {}  # the worker's laws, for the sampled arm against mu
    exact: dict[str, dict[str, Any] | None] = {}
    for cid, j in exact_jobs.items():
        why = unbuilt.get(cid) or (None if partial or cid not in chosen else
                                   f"not computed: its worker failed {RETRIES + 1} times (see the log above)")
        exact[cid] = _exact(j, out, campaign, why, exact_laws)
    for cid, e in exact.items():
        if e is not None:
            log(f"{cid}: exact {e['status']}" + (f" (TV {e['tv']:.3g}, {e['paths']:,} paths)" if e["tv"] is not None
                                                 else f": {e['reason']}"))
    if campaign.exact == "only":
        return _exact_only(campaign, out, seal, results, exact, log, start, marker, partial)
    reused = sum(1 for jobs in plans.values() for j in jobs if j.output(out).exists())
    run(plans, (lambda jobs: LookWatcher(jobs, out, campaign, campaign.m, log, on_stop=progress.settle))
        if campaign.anytime else None)
    incomplete = partial  # the report is partial: asked for, or an --only run left other configs' jobs

    def missing(jobs: list[Job]) -> list[Job]:
        return [j for j in jobs if not j.output(out).exists()]

    def failed(cid: str, jobs: list[Job]) -> str | None:  # tried RETRIES + 1 times in this run
        left = missing(jobs)
        return (f"{len(left)} job(s) failed after {RETRIES + 1} attempts (first: {left[0].label})"
                if left and not partial and cid in chosen else None)

    m = campaign.m
    found: dict[str, FolderDecision] = {}  # discovery decisions (anytime: a config decided at an early look
    for cid, jobs in plans.items():        # needs none of its later shards)
        got = anytime_decision(jobs[0].config, jobs, out, campaign, m) if campaign.anytime else \
            None if missing(jobs) else decide_from_folder(jobs[0].config, jobs, out, campaign, m)
        if got is not None:
            found[cid] = got
    if only is not None and not partial:
        if not interrupted_before:  # this run was not cut off; an earlier one's mark stays for the final report
            marker.unlink(missing_ok=True)
        # a config whose build is not set up here and whose jobs are not all done is INCONCLUSIVE, as in a whole run
        incomplete = any(cid not in found for cid in plans if cid not in unbuilt)
    states: dict[str, ConfigDecision | str | None] = {cid: r["decision"] for cid, r in results.items()}
    states.update({cid: found[cid].decision if cid in found else None if incomplete else INCONCLUSIVE
                   for cid in plans})
    selection = select_confirmations(campaign.configs, states)
    if campaign.confirm_without_hypothesis_events:  # RQ3's other cell: what the decisions without A_H select
        selection = joined(campaign.configs, selection,
                           select_confirmations(campaign.configs, without_hypothesis_events(states)))
    confirm = {cid: confirmation_jobs(campaign, plans[cid][0].config) for cid in selection.attempts}
    confirm = {cid: jobs for cid, jobs in confirm.items() if jobs}
    if confirm:
        reused += sum(1 for jobs in confirm.values() for j in jobs if j.output(out).exists())
        run(confirm, (lambda jobs: RecurrenceWatcher(jobs, found, out, campaign, log, on_stop=progress.settle))
            if campaign.confirm_anytime else None)
    # what each repair result reads: under confirm_anytime, the unrepaired arm up to the look that recurred
    reads = {cid: (confirmation_reads(found[cid], jobs, out, campaign) if cid in found else None) or (jobs, None)
             for cid, jobs in confirm.items()}
    if confirm and only is not None and not partial:
        incomplete = incomplete or any(missing(jobs) for jobs, _ in reads.values())
    waiting = set(selection.pending) if campaign.confirm_draws else set()  # their group is not decided yet
    decided: dict[str, tuple[dict[str, Any], dict[str, MergedArm]]] = {}  # laws and merged arms
    pending: list[dict[str, Any]] = []
    resumed = 0  # draws of decided configs that shards took over from checkpoints of cut-off runs
    for cid, jobs in plans.items():
        config = jobs[0].config
        conf_jobs = confirm.get(cid, [])
        conf_reads, recurred = reads.get(cid, ([], None))
        left = ([] if cid in found else missing(jobs)) + missing(conf_reads)
        why = (unbuilt.get(cid) or failed(cid, jobs + conf_reads)) if left else None
        if (left or cid in waiting) and incomplete:
            arms_done: dict[str, list[int]] = {}
            for j in jobs[1:] + conf_jobs:
                done_total = arms_done.setdefault(j.arm, [0, 0])
                done_total[0] += j.count if j.output(out).exists() else 0
                done_total[1] += j.count
            pending.append({"id": cid, "laws": jobs[0].output(out).exists(), "failed": why,
                            "draws": {arm: f"{d:,}/{t:,}" for arm, (d, t) in arms_done.items()}})
            if recurred is not None and recurred.index < recurred.of:  # its unrepaired arm needs no more draws
                pending[-1]["draws"]["on-confirm"] += f" (enough: it recurs at {recurred})"
            if cid in waiting and not left:
                pending[-1]["waiting"] = "its confirmation is selected once every config of its build is decided"
            if cid in found:  # its discovery is decided; only its confirmation is not done (or not selected)
                f = found[cid]
                at = f" at {f.look}" if f.look else ""
                pending[-1]["discovery"] = f"{f.decision.decision}{at}, D {f.decision.D:.4f}"
            if why and cid not in unbuilt:  # not decided: the next run retries them, so it is listed as pending
                log(f"{cid}: {why}; still pending, the next run retries them")
            continue
        if cid not in found:  # a whole run: every missing job was tried RETRIES + 1 times, so `why` is set
            results[cid] = inconclusive(config, str(why))
            continue
        folder = found[cid]
        if conf_reads and not missing(conf_reads):
            folder = decide_from_folder(config, folder.jobs + conf_reads, out, campaign, m, look=folder.look,
                                        confirm_look=recurred)
        d = folder.decision
        if conf_reads and missing(conf_reads):
            d = dataclasses.replace(d, repair=not_attempted(config["repair"], f"confirmation jobs failed: {why}"))
        elif cid in selection.not_attempted and campaign.confirm_draws:
            d = dataclasses.replace(d, repair=not_attempted(config["repair"], selection.not_attempted[cid]))
        resumed += folder.resumed
        decided[cid] = (folder.laws, folder.arms)
        results[cid] = {**d.to_dict(), "applied": config.get("applied", []), **_variant(config),
                        **_exact_beside(exact.get(cid), exact_laws.get(cid), folder, campaign, m),
                        "simulator_check": folder.laws.get("simulator_check"),
                        "simulator_metric": folder.laws.get("simulator_metric"),
                        "records_detail": {arm: folder.arms[arm].records for arm in ("on", "off")},
                        **other_tests(folder, d.decision, campaign.alpha / m)}
        log(f"{cid}: {d.decision} (D {d.D:.4f}, witnesses {d.witnesses.count}, contract "
            f"{(d.contract or {}).get('status', 'unchecked')})")
    for cid, r in results.items():  # configs not decided (not built, refused, failed) keep their exact channel
        if exact.get(cid) is not None and "exact" not in r:
            r["exact"] = exact[cid]
    report = {"campaign": campaign.name, "seal": seal["seal"], "alpha": campaign.alpha,
              "threshold": campaign.threshold, "m": m, **({"exact_tol": campaign.exact_tol} if exact else {}),
              "confirm_m": campaign.confirm_m,
              "anytime": [look.to_dict() for look in planned_looks(campaign.draws)] if campaign.anytime else None,
              "draws": campaign.draws, "confirm_draws": campaign.confirm_draws,
              "confirm_anytime": [look.to_dict() for look in planned_looks(campaign.confirm_draws)]
              if campaign.confirm_anytime else None,
              "confirm_draws_needed": needed,
              "confirmation_attempts": list(selection.attempts), "interrupted": interrupted_before,
              "jobs_reused": reused, "draws_resumed": resumed, "elapsed_s": round(time.monotonic() - start, 1),
              **_shard_provenance([j for js in [*plans.values(), *confirm.values()] for j in js], out),
              "configs": [results[c["id"]] for c in campaign.configs if c["id"] in results]}
    if len(drawing := {**report["code_versions"], **report["laws_code_versions"]}) > 1:
        log(f"the shards and laws were drawn by {len(drawing)} versions of badc's drawing code: see the report")
    if incomplete:
        report["pending"] = pending
    else:
        marker.unlink(missing_ok=True)
    name = "report-partial" if incomplete else "report"
    write_json(out / f"{name}.json", report)
    write_atomic(out / f"{name}.md", report_markdown(report))
    if plots and not incomplete:
        from badc_check.plots import plot_campaign

        plot_campaign(out, report, decided)
    return report


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


def _exact_only(campaign: Campaign, out: Path, seal: dict[str, Any], refused: dict[str, dict[str, Any]],
                exact: dict[str, dict[str, Any] | None], log: Callable[[str], None], start: float, marker: Path,
                partial: bool) -> dict[str, Any]:
    """`--exact-only`: no draws; each config's exact channel is its row (decision None)."""
    rows, pending = [], []
    for c in campaign.configs:
        e = exact.get(c["id"])
        if c["id"] in refused:
            e = {**exact_report(c, {"status": UNSUPPORTED, "reason": "refused by the engine with speculation on: "
                                                                     + refused[c["id"]]["refused"]},
                                tol=campaign.exact_tol, threshold=campaign.threshold, alpha=campaign.alpha,
                                m=campaign.m).to_dict()}
        if e is None:
            pending.append({"id": c["id"], "laws": False, "failed": None, "draws": {}})
            continue
        rows.append({"id": c["id"], "engine": c["engine"], "build": c["build"], "role": c.get("role", "probe"),
                     "decision": None, "exact": e})
    report: dict[str, Any] = {"campaign": campaign.name, "seal": seal["seal"], "alpha": campaign.alpha,
                              "threshold": campaign.threshold, "m": campaign.m, "draws": 0, "exact_only": True,
                              "exact_tol": campaign.exact_tol, "elapsed_s": round(time.monotonic() - start, 1),
                              "configs": rows}
    if pending:
        report["pending"] = pending
    elif not partial:
        marker.unlink(missing_ok=True)
    name = "report-partial" if pending else "report"
    write_json(out / f"{name}.json", report)
    write_atomic(out / f"{name}.md", report_markdown(report))
    return report


def _variant(config: dict[str, Any]) -> dict[str, Any]:
    """For a config expanded from `variants`: which config it came from, and its model and prompt."""
    if not config.get("variant_of"):
        return {}
    return {"variant": {"of": config["variant_of"], **{k: config[k] for k in ("model", "prompt") if k in config}}}
