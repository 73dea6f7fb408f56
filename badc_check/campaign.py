"""`badc run`: read a campaign, seal it, run its jobs in worker processes under each build's interpreter,
decide, confirm repairs, and write report.json, report.md, plots and traces.

Campaign file: DESIGN.md ("Campaign file"), plus an optional `[defaults]` table merged into every
`[[config]]`. A configuration's work is split into jobs: its exact laws, then shards of draws per arm.
A job's result is a file written atomically; a job whose file exists is never run again, and a shard
that was cut off goes on from its last checkpoint (every 30 s). So a worker that dies, an engine that
crashes the process, or an interrupted campaign loses at most the last half-minute of each shard in
flight, and running the same command again completes the sealed roster (each draw's seed is a
function of the campaign seed, config, arm and index). Configs whose build is not declared or not set
up are reported INCONCLUSIVE with the reason, never dropped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from badc_check.builds import build_for, load_builds
from badc_check.channels import RecordArm
from badc_check.confirmation import confirm_repair
from badc_check.decide import INCONCLUSIVE, Arm, Config, ConfigDecision, decide
from badc_replay.arms import checkpoint_interval
from badc_replay.contract import merge_contracts

# Trace level of decision arms: transformers' D2 replay compares each processor's recorded scores.
TRACE_LEVEL = {"transformers": "full"}
ROLES = ("probe", "negative-control", "positive-control")
BUILTIN = Path(__file__).resolve().parents[1] / "campaigns" / "builtin.toml"
SHARD = 20_000  # draws per job
RETRIES = 2  # a failed job is re-run this many times before its config is given up


class CampaignError(ValueError):
    pass


@dataclass
class Campaign:
    path: str
    name: str
    alpha: float
    threshold: float
    draws: int
    seed: int
    confirm_draws: int
    configs: list[dict[str, Any]]
    shard: int = SHARD  # draws per job: changes how work is spread, never the draws or their seeds

    def seal(self) -> dict[str, Any]:
        """Hashes of everything a decision depends on, taken before the first decision draw."""
        def h(obj: Any) -> str:
            return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()

        parts = {"configs": {c["id"]: h(c) for c in self.configs},
                 "settings": h({"alpha": self.alpha, "threshold": self.threshold, "draws": self.draws,
                                "seed": self.seed, "confirm_draws": self.confirm_draws}),
                 "seed_roster": h({"seed": self.seed, "rule": "blake2b(seed|config|arm|index)"}),
                 "hypotheses": h({c["id"]: c.get("hypothesis") for c in self.configs}),
                 "repairs": h({c["id"]: c.get("repair") for c in self.configs})}
        return {"campaign": self.name, "seal": h(parts), "parts": parts}


def load_campaign(path: str | Path, *, draws: int | None = None, confirm_draws: int | None = None) -> Campaign:
    path = str(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise CampaignError(f"{path}: not found") from None
    except tomllib.TOMLDecodeError as e:
        raise CampaignError(f"{path}: not valid TOML: {e}") from None
    camp = doc.get("campaign", {})
    defaults = doc.get("defaults", {})
    raw = doc.get("config")
    if not isinstance(raw, list) or not raw:
        raise CampaignError(f"{path}: needs at least one [[config]] table")
    configs = []
    for i, c in enumerate(raw):
        merged = {**defaults, **c}
        where = f"{path}: config[{i}]"
        for key in ("id", "engine", "build"):
            if not isinstance(merged.get(key), str) or not merged[key]:
                raise CampaignError(f"{where}: field {key!r} must be a non-empty string")
        if merged.get("role", "probe") not in ROLES:
            raise CampaignError(f"{where} ({merged['id']}): role must be one of {', '.join(ROLES)}")
        configs.append(merged)
    ids = [c["id"] for c in configs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise CampaignError(f"{path}: duplicate config ids: {', '.join(dup)}")
    try:
        campaign = Campaign(
            path=path, name=str(camp.get("name", Path(path).stem)), alpha=float(camp.get("alpha", 0.05)),
            threshold=float(camp.get("threshold", 0.01)),
            draws=int(draws if draws is not None else camp.get("draws", 200_000)), seed=int(camp.get("seed", 0)),
            confirm_draws=int(confirm_draws if confirm_draws is not None else camp.get("confirm_draws", 0)),
            configs=configs, shard=int(camp.get("shard", SHARD)))
    except (TypeError, ValueError) as e:
        raise CampaignError(f"{path}: [campaign]: {e}") from None
    if campaign.draws <= 0 or campaign.shard <= 0 or not 0 < campaign.alpha < 1:
        raise CampaignError(f"{path}: [campaign]: draws and shard must be positive and alpha in (0, 1)")
    return campaign


def installed_only(campaign: Campaign, log: Callable[[str], None] | None = None) -> Campaign:
    """The campaign without the configs whose build is not set up here (the built-in campaign runs on
    every installed engine); refuses when nothing is left."""
    builds = load_builds()
    keep, dropped = [], []
    for c in campaign.configs:
        b = builds.get(f"{c['engine']}-{c['build']}")
        (keep if b is not None and b.installed else dropped).append(c)
    if dropped:
        (log or (lambda m: print(m, file=sys.stderr)))(
            "badc run: left out (build not set up): " + ", ".join(f"{c['id']} ({c['engine']}-{c['build']})"
                                                                   for c in dropped))
    if not keep:
        raise CampaignError("no engine build is set up: run `python3.11 tools/setup_envs.py`")
    return dataclasses.replace(campaign, configs=keep)


def check_seal(campaign: Campaign, out: Path) -> dict[str, Any]:
    """Write the seal, or refuse when an existing one in `out` was made from other inputs."""
    seal = campaign.seal()
    path = out / "seal.json"
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("seal") != seal["seal"]:
            changed = [k for k in seal["parts"] if k != "configs" and old["parts"].get(k) != seal["parts"][k]]
            changed += [f"config {cid}" for cid, hv in seal["parts"]["configs"].items()
                        if old["parts"].get("configs", {}).get(cid) != hv]
            changed += [f"config {cid} (removed)" for cid in old["parts"].get("configs", {})
                        if cid not in seal["parts"]["configs"]]
            raise CampaignError(f"{out} is sealed for other inputs; changed: {', '.join(changed) or 'unknown'}. "
                                "Use a new --out folder.")
        # The shard size is no decision input, but shards are named by their first draw: finished shards
        # of another size would overlap the new ones, and their draws would count twice.
        if old.get("shard", campaign.shard) != campaign.shard:
            raise CampaignError(f"{out}: its finished shards hold {old['shard']:,} draws each, the campaign file now "
                                f"says shard = {campaign.shard:,}; set it back or use a new --out folder.")
    else:
        _write_json(path, {**seal, "shard": campaign.shard})
    return seal


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


# -- jobs ----------------------------------------------------------------------------------------


@dataclass
class Job:
    config: dict[str, Any]
    kind: str  # laws | shard
    arm: str = ""
    start: int = 0
    count: int = 0
    level: str = "calls"
    repair: str | None = None

    @property
    def cid(self) -> str:
        return self.config["id"]

    @property
    def label(self) -> str:
        return "laws" if self.kind == "laws" else f"shard {self.arm} {self.start}"

    def output(self, out: Path) -> Path:
        if self.kind == "laws":
            return out / "laws" / f"{self.cid}.json"
        return out / "shards" / self.cid / f"{self.arm}-{self.start}.json"

    def command(self, python: str, cfg_path: Path, out: Path, seed: int, seal: str = "") -> list[str]:
        cmd = [python, "-m", "badc_replay.worker", str(cfg_path), "--out", str(out), "--seal", seal]
        if self.kind == "laws":
            return cmd + ["--laws"]
        cmd += ["--arm", self.arm, "--start", str(self.start), "--count", str(self.count), "--seed", str(seed),
                "--level", self.level]
        return cmd + (["--repair", self.repair] if self.repair else [])


def plan(campaign: Campaign, config: dict[str, Any]) -> list[Job]:
    jobs = [Job(config, "laws")]

    def arm(name: str, draws: int, level: str, repair: str | None = None) -> None:
        for start in range(0, draws, campaign.shard):
            jobs.append(Job(config, "shard", name, start, min(campaign.shard, draws - start), level, repair))

    level = TRACE_LEVEL.get(config["engine"], "calls")
    arm("off", campaign.draws, level)
    arm("on", campaign.draws, level)
    if campaign.confirm_draws and config.get("repair"):
        arm("off-confirm", campaign.confirm_draws, "counts")
        arm("on-confirm", campaign.confirm_draws, "counts")
        arm("repaired", campaign.confirm_draws, level, config["repair"])
    return jobs


# -- progress ------------------------------------------------------------------------------------


@dataclass
class Progress:
    """Draws done per (config, arm), shown as one bar per active arm with draws per second."""

    totals: dict[tuple[str, str], int] = field(default_factory=dict)
    done: dict[tuple[str, str], int] = field(default_factory=dict)
    inflight: dict[tuple[str, str, int], int] = field(default_factory=dict)
    started: dict[tuple[str, str], float] = field(default_factory=dict)
    log: Callable[[str], None] = print
    last: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    t0: float | None = None  # first shard of this run
    reused: int = 0  # draws already done by an earlier run
    arm_reused: dict[tuple[str, str], int] = field(default_factory=dict)  # the same, per arm
    workers: int = 0  # shards running at once (0: unknown, e.g. on a Ray cluster)
    shard_s: float = 0.0  # worker-seconds of every finished shard, earlier runs' included,
    shard_draws: int = 0  # and the draws they timed
    arm_timed: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)  # the same, per arm

    def begin(self, cid: str, arm: str) -> None:
        with self.lock:
            now = time.monotonic()
            self._start((cid, arm), now)
            if self.t0 is None:
                self.t0, self.reused = now, sum(self.done.values())

    def timed(self, shard: Path) -> None:
        """Count a finished shard's worker time (its JSON's `elapsed_s`, for the draws it did itself)."""
        try:
            d = json.loads(shard.read_text())
            elapsed, draws = float(d["elapsed_s"]), int(d["count"]) - int(d.get("resumed", 0))
        except (OSError, ValueError, KeyError, TypeError):
            return  # an estimate only: a shard without timings is left out
        with self.lock:
            self.shard_s, self.shard_draws = self.shard_s + elapsed, self.shard_draws + draws
            if "id" in d and "arm" in d:
                s, n = self.arm_timed.get((d["id"], d["arm"]), (0.0, 0))
                self.arm_timed[(d["id"], d["arm"])] = (s + elapsed, n + draws)

    def _start(self, key: tuple[str, str], now: float) -> None:
        # an arm's rate counts from its first shard in this run, without the draws earlier runs did
        if key not in self.started:
            self.started[key], self.arm_reused[key] = now, self.done.get(key, 0)

    def update(self, cid: str, arm: str, start: int, n: int, final: bool = False, resumed: bool = False) -> None:
        """`n` draws of the shard at `start` are done (`final`: all of them); `resumed`: a checkpoint of
        an earlier run held them, so they do not count toward this run's rate."""
        with self.lock:
            key = (cid, arm)
            self._start(key, time.monotonic())
            if resumed:
                self.reused += n
                self.arm_reused[key] += n
            if final:
                self.inflight.pop((cid, arm, start), None)
                self.done[key] = self.done.get(key, 0) + n
            else:
                self.inflight[(cid, arm, start)] = n
            now = time.monotonic()
            if final or now - self.last >= 5:
                self.last = now
                self._show(key)

    def _drawn(self, key: tuple[str, str]) -> int:
        return self.done.get(key, 0) + sum(v for (c, a, _), v in self.inflight.items() if (c, a) == key)

    def _show(self, key: tuple[str, str]) -> None:
        total = self.totals.get(key, 0)
        n = self._drawn(key)
        now = time.monotonic()
        rate = (n - self.arm_reused[key]) / max(now - self.started[key], 1e-9)
        width = 24
        filled = round(width * n / total) if total else width
        self.log(f"{key[0]:>12} {key[1]:<11} [{'#' * filled}{'.' * (width - filled)}] {n:>9,}/{total:,} "
                 f"{rate:,.0f} draws/s{self._campaign(now)}")

    def _campaign(self, now: float) -> str:
        """The whole roster's share done and roughly how long is left: each arm's draws left at the worker
        time per draw of its own finished shards, or of every finished shard while it has none, earlier
        runs' included (arms differ in cost several-fold: a repaired arm can take three times the
        campaign's mean, and this run's rate alone misleads after a restart in a slow arm), or else at
        this run's rate so far."""
        total = sum(self.totals.values())
        done = sum(self.done.values()) + sum(self.inflight.values())
        if not total or self.t0 is None:
            return ""
        left, s = "", None
        if self.workers and self.shard_draws > 0 and self.shard_s > 0:
            mean = self.shard_s / self.shard_draws
            s = 0.0
            for key, n in self.totals.items():
                arm_s, arm_draws = self.arm_timed.get(key, (0.0, 0))
                s += max(n - self._drawn(key), 0) * (arm_s / arm_draws if arm_s > 0 and arm_draws > 0 else mean)
            s /= self.workers
        elif now - self.t0 >= 60 and done > self.reused:
            s = (total - done) / ((done - self.reused) / (now - self.t0))
        if s is not None:
            left = (f", ~{s:.0f} s left" if s < 90 else f", ~{s / 60:.0f} min left" if s < 5400
                    else f", ~{s / 3600:.1f} h left")
        return f" | campaign {100 * done / total:.1f}% of {total:,}{left}"


# -- executors -----------------------------------------------------------------------------------


def _run_local(job: Job, cmd: list[str], progress: Progress, log: Callable[[str], None]) -> int:
    if job.kind == "shard":
        progress.begin(job.cid, job.arm)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tail: list[str] = []
    try:
        for line in proc.stderr:
            if line.startswith(("progress ", "resumed ")):
                progress.update(job.cid, job.arm, job.start, int(line.split()[2].split("/")[0]),
                                resumed=line.startswith("resumed "))
            elif "n_ctx" not in line and line.strip():
                tail = (tail + [line.rstrip()])[-10:]
        return proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if proc.returncode not in (0, None):
            log(f"{job.cid}: worker exited with {proc.returncode}: " + " | ".join(tail[-3:]))


def _ray_task(cmd: list[str]) -> int:  # runs on a Ray worker; the folder must be shared with it
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def _run_inline(job: Job, out: Path, seed: int, seal: str) -> int:
    """In this process, with this interpreter's engine (the pytest plugin's way)."""
    from badc_replay import worker

    if job.kind == "laws":
        worker.laws(job.config, out)
    else:
        worker.shard(job.config, job.arm, job.start, job.count, seed, out, level=job.level, repair=job.repair,
                     seal=seal)
    return 0


class Executor:
    """Runs jobs with K local worker processes, as Ray tasks (`executor="ray"`), or in this process
    (`executor="inline"`, with the engine of the running interpreter)."""

    def __init__(self, kind: str, workers: int, progress: Progress, log: Callable[[str], None]):
        if kind not in ("local", "ray", "inline"):
            raise CampaignError(f"executor must be local, ray or inline, not {kind!r}")
        self.kind, self.workers, self.progress, self.log = kind, max(1, workers), progress, log
        # how many shards run at once, for the time-left estimate; unknown on a Ray cluster
        progress.workers = 1 if kind == "inline" else 0 if os.environ.get("RAY_ADDRESS") else self.workers
        if kind == "ray":
            try:
                import ray
            except ImportError:
                raise CampaignError("the Ray executor needs ray: pip install 'ray[default]' in .venv") from None
            if not ray.is_initialized():
                ray.init(address=os.environ.get("RAY_ADDRESS") or None, num_cpus=None if os.environ.get(
                    "RAY_ADDRESS") else self.workers, include_dashboard=False, log_to_driver=False)
            self._remote = ray.remote(num_cpus=1)(_ray_task)

    def run(self, jobs: list[tuple[Job, list[str]]], out: Path | None = None, seed: int = 0,
            seal: str = "") -> list[int]:
        if self.kind == "inline":
            codes = []
            for job, _ in jobs:
                codes.append(_run_inline(job, out, seed, seal))
                self._finished(job, codes[-1], out)
            return codes
        if self.kind == "ray":
            import ray

            for job, _ in jobs:
                if job.kind == "shard":
                    self.progress.begin(job.cid, job.arm)
            refs = [self._remote.remote(cmd) for _, cmd in jobs]
            codes = []
            for (job, _), ref in zip(jobs, refs, strict=True):
                codes.append(ray.get(ref))
                self._finished(job, codes[-1], out)
            return codes
        from concurrent.futures import ThreadPoolExecutor

        def one(item: tuple[Job, list[str]]) -> int:
            job, cmd = item
            code = _run_local(job, cmd, self.progress, self.log)
            self._finished(job, code, out)
            return code

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(one, jobs))

    def _finished(self, job: Job, code: int, out: Path | None) -> None:
        if job.kind == "shard" and code == 0:
            self.progress.update(job.cid, job.arm, job.start, job.count, final=True)
            if out is not None:
                self.progress.timed(job.output(out))


# -- merging and deciding ------------------------------------------------------------------------


def merge_shards(shards: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm from its shards: counts add up; the first violation is the earliest draw's."""
    outcomes: dict[str, int] = {}
    total = {"proposed": 0, "accepted": 0, "violations": 0, "draws": 0}
    records: dict[str, Any] | None = None
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
        if r is not None:
            records = records or {"draws": 0, "mismatch": 0, "positions": {}, "first_mismatch": None}
            records["draws"] += r["draws"]
            records["mismatch"] += r["mismatch"]
            for p, k in r["positions"].items():
                records["positions"][str(p)] = records["positions"].get(str(p), 0) + k
            records["first_mismatch"] = records["first_mismatch"] or r.get("first_mismatch")
    contract = merge_contracts([(s["start"], s.get("contract") or {}) for s in shards])
    return {"outcomes": outcomes, **total, "contract": contract, "records": records}


def decide_config(config: dict[str, Any], laws: dict[str, Any], arms: dict[str, dict[str, Any]],
                  campaign: Campaign, m: int) -> ConfigDecision:
    hyp = laws.get("hypothesis")
    on, off = arms["on"], arms["off"]

    def record_arm(a: dict[str, Any]) -> RecordArm | None:
        r = a.get("records")
        return None if r is None else RecordArm(r["draws"], r["mismatch"],
                                                {int(k): v for k, v in r["positions"].items()})

    rec_on, rec_off = record_arm(on), record_arm(off)
    predicates = {name: frozenset(laws.get("predicates", {}).get(name, ())) for name in config.get("predicates", [])}
    cfg = Config(
        id=config["id"], engine=config["engine"], build=laws.get("build", config["build"]),
        role=config.get("role", "probe"), on=Arm(on["outcomes"], on["violations"], on["proposed"], on["accepted"]),
        off=Arm(off["outcomes"], off["violations"]), reference=laws["reference"], predicates=predicates,
        hypothesis=(hyp["id"], hyp["law"]) if hyp else None,
        records_status="complete" if rec_on and rec_off else "not_returned", records_on=rec_on, records_off=rec_off)
    d = decide(cfg, alpha=campaign.alpha, m=m, threshold=campaign.threshold)
    object.__setattr__(d, "contract", on["contract"])
    if "repaired" in arms:
        frozen = [f"A_H({hyp['id']})"] if hyp else [d.channel_s.argmax_crash_free]
        n_conf = sum(1 for c in campaign.configs if c.get("repair"))
        r = confirm_repair(config["repair"], cfg.family(), frozen, laws["reference"], predicates,
                           arms["off-confirm"]["outcomes"], arms["on-confirm"]["outcomes"],
                           arms["repaired"]["outcomes"], proposed_on=arms["on-confirm"]["proposed"],
                           proposed_repaired=arms["repaired"]["proposed"], alpha=campaign.alpha, m=max(n_conf, 1))
        object.__setattr__(d, "repair", r)
    return d


def _inconclusive(config: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"id": config["id"], "engine": config["engine"], "build": config["build"],
            "role": config.get("role", "probe"), "decision": INCONCLUSIVE, "eligible": False, "D": None,
            "witnesses": 0, "draws": {"on": 0, "off": 0}, "crashes": {"on": 0, "off": 0},
            "exercise": {"proposed": None, "accepted": None}, "calibration": {"passed": None}, "hypothesis": None,
            "records": {"status": "incomplete", "failed": False}, "repair": None, "contract": None,
            "reasons": [reason]}


# -- the campaign --------------------------------------------------------------------------------


def run_campaign(campaign: Campaign, out: str | Path, *, workers: int = 2, executor: str = "local",
                 log: Callable[[str], None] | None = None, plots: bool = True, partial: bool = False,
                 only: list[str] | None = None) -> dict[str, Any]:
    """Run the sealed roster's missing jobs, then decide every config. With `partial`, run nothing:
    decide the configs whose jobs are all done (with the whole roster's m, so their bounds are the
    final ones), list the others as pending, and write report-partial.json and .md. With `only`, run
    just those configs' jobs (the roster, its seal and m stay whole, so the draws and bounds are the
    ones a full run gives) and write the partial report, or the full one once every job is done."""
    out = Path(out)
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
    out.mkdir(parents=True, exist_ok=True)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    seal = check_seal(campaign, out)
    marker = out / "RUNNING"
    interrupted_before = marker.exists()
    if not partial:
        if interrupted_before:
            log(f"{out}: an earlier run was interrupted; completing its sealed roster")
        marker.write_text(str(os.getpid()))
    start = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    progress = Progress(log=log)
    plans: dict[str, list[Job]] = {}
    pythons: dict[str, str] = {}
    for c in campaign.configs:
        try:
            inline = executor == "inline"
            pythons[c["id"]] = sys.executable if inline else str(build_for(c["engine"], c["build"]).python)
        except LookupError as e:
            results[c["id"]] = _inconclusive(c, str(e))
            continue
        plans[c["id"]] = plan(campaign, c)
        if not partial:
            cfg_path = out / "configs" / f"{c['id']}.json"
            cfg_path.parent.mkdir(exist_ok=True)
            _write_json(cfg_path, c)
    reused = sum(1 for jobs in plans.values() for j in jobs if j.output(out).exists())
    chosen = {cid: jobs for cid, jobs in plans.items() if only is None or cid in only}  # what this run runs
    for cid, jobs in chosen.items():  # so the progress and time left are this run's
        for j in jobs:
            if j.kind == "shard":
                progress.totals[(cid, j.arm)] = progress.totals.get((cid, j.arm), 0) + j.count
                if j.output(out).exists():
                    progress.done[(cid, j.arm)] = progress.done.get((cid, j.arm), 0) + j.count
                    progress.timed(j.output(out))
    ex = Executor(executor, workers, progress, log)
    # Laws first (a config without its laws cannot be decided), then every shard, retried on failure.
    for phase in () if partial else ("laws", "shard"):
        for attempt in range(RETRIES + 1):
            todo = [(j, j.command(pythons[j.cid], out / "configs" / f"{j.cid}.json", out, campaign.seed, seal["seal"]))
                    for jobs in chosen.values() for j in jobs if j.kind == phase and not j.output(out).exists()]
            if not todo:
                break
            if attempt:
                log(f"retrying {len(todo)} failed {phase} job(s) (attempt {attempt + 1})")
            ex.run(todo, out, campaign.seed, seal["seal"])
    incomplete = partial  # the report is partial: asked for, or an --only run left other configs' jobs
    if only is not None and not partial:
        if not interrupted_before:  # this run was not cut off; an earlier one's mark stays for the final report
            marker.unlink(missing_ok=True)
        incomplete = any(not j.output(out).exists() for jobs in plans.values() for j in jobs)
    m = len(campaign.configs)
    decided: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {}  # laws and merged arms
    pending: list[dict[str, Any]] = []
    resumed = 0  # draws of decided configs that shards took over from checkpoints of cut-off runs
    for cid, jobs in plans.items():
        config = jobs[0].config
        missing = [j for j in jobs if not j.output(out).exists()]
        failed = (f"{len(missing)} job(s) failed after {RETRIES + 1} attempts (first: {missing[0].label})"
                  if missing and not partial and cid in chosen else None)  # tried RETRIES + 1 times here
        if missing and incomplete:
            arms_done: dict[str, list[int]] = {}
            for j in jobs[1:]:
                done_total = arms_done.setdefault(j.arm, [0, 0])
                done_total[0] += j.count if j.output(out).exists() else 0
                done_total[1] += j.count
            pending.append({"id": cid, "laws": jobs[0].output(out).exists(), "failed": failed,
                            "draws": {arm: f"{d:,}/{t:,}" for arm, (d, t) in arms_done.items()}})
            if failed:  # not decided: the next run retries them, so the partial report lists it as pending
                log(f"{cid}: {failed}; still pending, the next run retries them")
            continue
        if missing:  # a whole run: every missing job was tried RETRIES + 1 times, so `failed` is set
            results[cid] = _inconclusive(config, str(failed))
            continue
        found = decide_from_folder(config, jobs, out, campaign, m)
        resumed += found.resumed
        decided[cid] = (found.laws, found.arms)
        d = found.decision
        results[cid] = {**d.to_dict(), "simulator_check": found.laws.get("simulator_check"),
                        "records_detail": {arm: found.arms[arm]["records"] for arm in ("on", "off")}}
        log(f"{cid}: {d.decision} (D {d.D:.4f}, returned {d.channel_s.D_returned:.4f}, witnesses {d.witnesses.count})")
    report = {"campaign": campaign.name, "seal": seal["seal"], "alpha": campaign.alpha,
              "threshold": campaign.threshold, "m": m, "draws": campaign.draws,
              "confirm_draws": campaign.confirm_draws, "interrupted": interrupted_before, "jobs_reused": reused,
              "draws_resumed": resumed, "elapsed_s": round(time.monotonic() - start, 1),
              "configs": [results[c["id"]] for c in campaign.configs if c["id"] in results]}
    if incomplete:
        report["pending"] = pending
    else:
        marker.unlink(missing_ok=True)
    name = "report-partial" if incomplete else "report"
    _write_json(out / f"{name}.json", report)
    (out / f"{name}.md").write_text(report_markdown(report))
    if plots and not incomplete:
        from badc_check.plots import plot_campaign

        plot_campaign(out, report, decided)
    return report


@dataclass
class FolderDecision:
    """One config decided from the finished jobs in a campaign folder."""

    decision: ConfigDecision
    laws: dict[str, Any]  # the laws job's output, with the registered predicates' outcome sets added
    arms: dict[str, dict[str, Any]]  # each arm merged from its shards
    resumed: int  # draws the shards took over from checkpoints of cut-off runs


def decide_from_folder(config: dict[str, Any], jobs: list[Job], out: Path, campaign: Campaign, m: int,
                       arms: tuple[str, ...] | None = None) -> FolderDecision:
    """Decide `config` from its jobs' outputs in `out` (every job of the chosen arms must be done).
    `arms` limits the arms read: ("on", "off") decides a config before its repair-confirmation arms
    are done, without the repair result."""
    laws = json.loads(jobs[0].output(out).read_text())
    shards: dict[str, list[dict[str, Any]]] = {}
    for j in jobs[1:]:
        if arms is None or j.arm in arms:
            shards.setdefault(j.arm, []).append(json.loads(j.output(out).read_text()))
    merged = {arm: merge_shards(s) for arm, s in shards.items()}
    if config.get("predicates"):
        laws["predicates"] = _predicate_sets(config, laws, merged)
    return FolderDecision(decision=decide_config(config, laws, merged, campaign, m), laws=laws, arms=merged,
                          resumed=sum(s.get("resumed", 0) for arm in shards.values() for s in arm))


def _predicate_sets(config: dict[str, Any], laws: dict[str, Any],
                    arms: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Registered predicates as lists of the violating outcomes among all the laws and arms contain
    (predicates are pure functions of outcome strings; the engine module defines them)."""
    from badc_replay.worker import engine_module

    mod = engine_module(config)
    cfg = mod.config_from_dict(config)
    known = set(laws["reference"]) | set(laws.get("hypothesis", {}).get("law", {}))
    for arm in arms.values():
        known |= set(arm["outcomes"])
    return {name: sorted(y for y in known if mod.predicate(name, cfg)(y)) for name in config["predicates"]}


def report_markdown(report: dict[str, Any]) -> str:
    def f(v: Any) -> str:
        return "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))

    lines = [f"# badc report: {report['campaign']}", "",
             f"Seal `{report['seal'][:16]}`; alpha {report['alpha']} family-wise over m = {report['m']}; "
             f"threshold {report['threshold']}; {report['draws']:,} draws per arm"
             + (f", {report['confirm_draws']:,} per confirmation arm" if report.get("confirm_draws") else "") + ". "
             "NOT_REJECTED means the test did not reject; it is not evidence of conformance.", ""]
    if "pending" in report:
        lines += [f"**Partial report: {len(report['configs'])} of {report['m']} configs decided**, each with the "
                  "whole roster's m, so these decisions are final; the pending configs are listed at the end.", ""]
    elif report.get("interrupted"):
        lines += ["**This campaign was interrupted and completed from its sealed roster** "
                  f"({report['jobs_reused']} jobs reused, {report.get('draws_resumed', 0):,} draws taken over from "
                  "checkpoints of cut-off shards).", ""]
    lines += ["| config | engine | build | role | decision | eligible | D | D returned | witnesses | proposed | "
              "calibration | hypothesis | repair |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in report["configs"]:
        hyp = c.get("hypothesis")
        hyp_s = "-" if not hyp else (f"{hyp['id']}: {'compatible' if hyp['compatible'] else 'incompatible'}, null "
                                     f"{'rejected' if hyp['null_rejected'] else 'not rejected'}")
        rep = c.get("repair")
        rep_s = "-" if not rep else (f"{rep['id']}: {'confirmed' if rep['confirmed'] else 'not confirmed'} "
                                     f"(recurrence {rep['recurrence']:.4f}, gap UB {rep['gap_ub']:.4f}, "
                                     f"witness UB {rep['witness_ub']:.1e})")
        lines.append(f"| {c['id']} | {c['engine']} | {c['build']} | {c['role']} | **{c['decision']}** | "
                     f"{'yes' if c['eligible'] else 'no'} | {f(c.get('D'))} | {f(c.get('D_returned'))} | "
                     f"{c['witnesses']} | {f(c['exercise']['proposed'])} | {f(c['calibration']['passed'])} | "
                     f"{hyp_s} | {rep_s} |")
    for c in report["configs"]:
        lines += ["", f"## {c['id']}: {c['decision']}", ""]
        lines += [f"- {r}" for r in c.get("reasons", [])]
        if c.get("D_event"):
            lines.append(f"- D attained on `{c['D_event']}`; crash-free returned-output D {f(c.get('D_crash_free'))} "
                         f"on `{c.get('D_crash_free_event')}`; {c.get('events')} events, B = {c.get('bounds')}")
        if c.get("witness_outcomes"):
            lines.append("- witness outcomes: " + ", ".join(f"`{y}` x{k}" for y, k in
                                                          list(c["witness_outcomes"].items())[:8]))
        contract = c.get("contract")
        if contract and contract.get("first_violation"):
            fv = contract["first_violation"]
            lines.append(f"- contract: {contract['violations']} violating calls in {contract['violating_requests']} "
                         f"of {contract['requests']} requests; first: {fv['message']}")
        elif contract:
            lines.append(f"- contract: {contract['calls']} calls replayed, no violation")
        if contract and contract.get("carried_over"):
            lines.append(f"- drafter state carried over: {contract['carried_over']:,} of {contract['requests']:,} "
                         f"requests did not start from the first request's drafter settings, so a draw may "
                         f"depend on the draws before it; first: {contract['first_carry_over']['message']}")
        if c.get("records", {}).get("status") == "complete":
            lines.append(f"- records (channel R): {'FAILED' if c['records']['failed'] else 'not rejected'}, "
                         f"gap {f(c['records'].get('gap'))}")
        if c.get("simulator_check") is not None:
            lines.append(f"- hypothesis simulator with logical reads reproduces P to {c['simulator_check']:.1e}")
    if report.get("pending"):
        lines += ["", "## Pending (jobs not all done)", "",
                  "| config | laws | draws done per arm | failed in this run (the next run retries) |",
                  "|---|---|---|---|"]
        lines += [f"| {p['id']} | {'done' if p['laws'] else 'pending'} | "
                  + ", ".join(f"{arm} {n}" for arm, n in p["draws"].items()) + f" | {p['failed'] or '-'} |"
                  for p in report["pending"]]
    return "\n".join(lines) + "\n"
