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
from badc_check.confirmation import confirm_repair, not_attempted
from badc_check.decide import (
    INCONCLUSIVE,
    Arm,
    Config,
    ConfigDecision,
    contract_cell,
    contract_lines,
    decide,
    should_stop,
)
from badc_check.looks import Look, planned_looks
from badc_check.selection import confirmation_m, select_confirmations
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
    family_m: int | None = None  # the study's multiplicity family when it is larger than this roster
    anytime: bool = False  # stop a config at its first planned look with an eligible FAILS or VOID (looks.py)

    @property
    def m(self) -> int:
        """Configurations in the multiplicity family: `[campaign] m`, or the roster (with its includes)."""
        return self.family_m or len(self.configs)

    def seal(self) -> dict[str, Any]:
        """Hashes of everything a decision depends on, taken before the first decision draw."""
        def h(obj: Any) -> str:
            return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()

        settings = {"alpha": self.alpha, "threshold": self.threshold, "draws": self.draws, "seed": self.seed,
                    "confirm_draws": self.confirm_draws}
        if self.family_m is not None:  # only when set, so that earlier seals stay valid
            settings["m"] = self.family_m
        if self.anytime:
            settings["anytime"] = {"looks": [look.to_dict() for look in planned_looks(self.draws)]}
        parts = {"configs": {c["id"]: h(c) for c in self.configs},
                 "settings": h(settings),
                 "seed_roster": h({"seed": self.seed, "rule": "blake2b(seed|config|arm|index)"}),
                 "hypotheses": h({c["id"]: c.get("hypothesis") for c in self.configs}),
                 "repairs": h({c["id"]: c.get("repair") for c in self.configs})}
        return {"campaign": self.name, "seal": h(parts), "parts": parts}


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise CampaignError(f"{path}: not found") from None
    except tomllib.TOMLDecodeError as e:
        raise CampaignError(f"{path}: not valid TOML: {e}") from None


def _configs_of(path: str, doc: dict[str, Any], seen: tuple[str, ...]) -> list[dict[str, Any]]:
    """The file's [[config]] tables with its [defaults] merged in, then those of the files it includes
    (`[campaign] include`, paths relative to the file; each brings its own [defaults])."""
    defaults = doc.get("defaults", {})
    raw = doc.get("config", [])
    include = doc.get("campaign", {}).get("include", [])
    if not isinstance(include, list) or not all(isinstance(p, str) for p in include):
        raise CampaignError(f"{path}: [campaign] include must be a list of campaign file paths")
    if not isinstance(raw, list):
        raise CampaignError(f"{path}: [[config]] must be an array of tables")
    configs = []
    for i, c in enumerate(raw):
        merged = {**defaults, **c}
        where = f"{path}: config[{i}]"
        for key in ("id", "engine", "build"):
            if not isinstance(merged.get(key), str) or not merged[key]:
                raise CampaignError(f"{where}: field {key!r} must be a non-empty string")
        if merged.get("role", "probe") not in ROLES:
            raise CampaignError(f"{where} ({merged['id']}): role must be one of {', '.join(ROLES)}")
        if "priority" in merged and type(merged["priority"]) is not int:
            raise CampaignError(f"{where} ({merged['id']}): priority must be an integer (lower is confirmed first)")
        configs.append(merged)
    for rel in include:
        sub = str(Path(path).parent / rel)
        if Path(sub).resolve() in {Path(p).resolve() for p in seen}:
            raise CampaignError(f"{path}: include {rel!r} includes itself (through {' -> '.join(seen)})")
        configs += _configs_of(sub, _read_toml(sub), (*seen, sub))
    return configs


def load_campaign(path: str | Path, *, draws: int | None = None, confirm_draws: int | None = None,
                  anytime: bool | None = None) -> Campaign:
    path = str(path)
    doc = _read_toml(path)
    camp = doc.get("campaign", {})
    configs = _configs_of(path, doc, (path,))
    if not configs:
        raise CampaignError(f"{path}: needs at least one [[config]] table (its own or an included file's)")
    ids = [c["id"] for c in configs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise CampaignError(f"{path}: duplicate config ids: {', '.join(dup)}")
    family_m = camp.get("m")
    if family_m is not None and (type(family_m) is not int or family_m < len(configs)):
        raise CampaignError(f"{path}: [campaign] m must be an integer >= the {len(configs)} configs of the roster, "
                            f"got {family_m!r}")
    try:
        campaign = Campaign(
            path=path, name=str(camp.get("name", Path(path).stem)), alpha=float(camp.get("alpha", 0.05)),
            threshold=float(camp.get("threshold", 0.01)),
            draws=int(draws if draws is not None else camp.get("draws", 200_000)), seed=int(camp.get("seed", 0)),
            confirm_draws=int(confirm_draws if confirm_draws is not None else camp.get("confirm_draws", 0)),
            configs=configs, shard=int(camp.get("shard", SHARD)), family_m=family_m,
            anytime=bool(anytime if anytime is not None else camp.get("anytime", False)))
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


def _arm_jobs(campaign: Campaign, config: dict[str, Any], name: str, draws: int, level: str,
              repair: str | None = None, looks: bool = False) -> list[Job]:
    """Shards of `campaign.shard` draws; with `looks`, also cut at every planned look, so that each look's
    prefix is a whole number of shards."""
    cuts = set(range(0, draws, campaign.shard))
    if looks:
        cuts |= {look.draws for look in planned_looks(draws)[:-1]}
    bounds = [*sorted(cuts), draws]
    return [Job(config, "shard", name, a, b - a, level, repair) for a, b in zip(bounds, bounds[1:], strict=False)]


def discovery_jobs(campaign: Campaign, config: dict[str, Any]) -> list[Job]:
    """The laws, then the off and on arms (stages S1-S2)."""
    level = TRACE_LEVEL.get(config["engine"], "calls")
    return [Job(config, "laws"), *_arm_jobs(campaign, config, "off", campaign.draws, level, looks=campaign.anytime),
            *_arm_jobs(campaign, config, "on", campaign.draws, level, looks=campaign.anytime)]


def confirmation_jobs(campaign: Campaign, config: dict[str, Any]) -> list[Job]:
    """Fresh off and on arms and the repaired arm (stage S3), for a config selected for confirmation."""
    if not (campaign.confirm_draws and config.get("repair")):
        return []
    n, level = campaign.confirm_draws, TRACE_LEVEL.get(config["engine"], "calls")
    return [*_arm_jobs(campaign, config, "off-confirm", n, "counts"),
            *_arm_jobs(campaign, config, "on-confirm", n, "counts"),
            *_arm_jobs(campaign, config, "repaired", n, level, config["repair"])]


def plan(campaign: Campaign, config: dict[str, Any]) -> list[Job]:
    """Every job a config can have: discovery, and confirmation if it is selected for it."""
    return discovery_jobs(campaign, config) + confirmation_jobs(campaign, config)


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
                  campaign: Campaign, m: int, look: Look | None = None) -> ConfigDecision:
    """The decision from merged arms; at an anytime `look`, with that look's share of the budget."""
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
        records_status="complete" if rec_on and rec_off else "not_returned", records_on=rec_on, records_off=rec_off,
        contract={**on["contract"], "off": off["contract"]})
    d = decide(cfg, alpha=campaign.alpha, m=m, threshold=campaign.threshold,
               spend=1.0 if look is None else look.spend)
    if look is not None:
        d = dataclasses.replace(d, look=look.to_dict())
    if "repaired" in arms:
        frozen = [f"A_H({hyp['id']})"] if hyp else [d.channel_s.argmax_crash_free]
        r = confirm_repair(config["repair"], cfg.family(), frozen, laws["reference"], predicates,
                           arms["off-confirm"]["outcomes"], arms["on-confirm"]["outcomes"],
                           arms["repaired"]["outcomes"], proposed_on=arms["on-confirm"]["proposed"],
                           proposed_repaired=arms["repaired"]["proposed"], alpha=campaign.alpha,
                           m=confirmation_m(campaign.configs))
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
    ones a full run gives) and write the partial report, or the full one once every job is done.

    Discovery (laws, off and on arms) runs first; then the configs selected for confirmation
    (badc_check/selection.py: one eligible, calibrated, compatible FAILS per cause and build, by sealed
    priority) get their confirmation arms."""
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
        plans[c["id"]] = discovery_jobs(campaign, c)
        if not partial:
            cfg_path = out / "configs" / f"{c['id']}.json"
            cfg_path.parent.mkdir(exist_ok=True)
            _write_json(cfg_path, c)
    chosen = {cid for cid in plans if only is None or cid in only}  # what this run runs
    ex = Executor(executor, workers, progress, log)

    def run(jobs: dict[str, list[Job]], looks: bool = False) -> None:
        """Laws first (a config without its laws cannot be decided), then every shard, retried on failure.
        With `looks` (discovery under --anytime), shards run look by look, and a config whose look
        decided (FAILS with eligible evidence, or VOID) runs no more of them."""
        for cid, js in jobs.items():  # so the progress and time left are this run's
            for j in js if cid in chosen else ():
                if j.kind == "shard":
                    progress.totals[(cid, j.arm)] = progress.totals.get((cid, j.arm), 0) + j.count
                    if j.output(out).exists():
                        progress.done[(cid, j.arm)] = progress.done.get((cid, j.arm), 0) + j.count
                        progress.timed(j.output(out))
        waves = planned_looks(campaign.draws) if looks else [None]
        stopped: set[str] = set()
        for phase in () if partial else ("laws", "shard"):
            for look in waves if phase == "shard" else [None]:
                lo = 0 if look is None or look.index == 1 else waves[look.index - 2].draws
                hi = campaign.draws if look is None else look.draws
                for attempt in range(RETRIES + 1):
                    todo = [(j, j.command(pythons[j.cid], out / "configs" / f"{j.cid}.json", out, campaign.seed,
                                          seal["seal"]))
                            for cid, js in jobs.items() if cid in chosen and cid not in stopped for j in js
                            if j.kind == phase and not j.output(out).exists()
                            and (look is None or lo <= j.start < hi)]
                    if not todo:
                        break
                    if attempt:
                        log(f"retrying {len(todo)} failed {phase} job(s) (attempt {attempt + 1})")
                    ex.run(todo, out, campaign.seed, seal["seal"])
                if look is not None and look.index < look.of:
                    for cid in set(jobs) & chosen - stopped:
                        found = anytime_decision(jobs[cid][0].config, jobs[cid], out, campaign, campaign.m)
                        if found is not None and found.decision.look["look"] <= look.index:
                            stopped.add(cid)
                            log(f"{cid}: {found.decision.decision} at look {look.index} of {look.of} "
                                f"({look.draws:,} draws per arm): its remaining shards are not needed")

    reused = sum(1 for jobs in plans.values() for j in jobs if j.output(out).exists())
    run(plans, looks=campaign.anytime)
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
        incomplete = len(found) < len(plans)
    states: dict[str, ConfigDecision | str | None] = {cid: r["decision"] for cid, r in results.items()}
    states.update({cid: found[cid].decision if cid in found else None if incomplete else INCONCLUSIVE
                   for cid in plans})
    selection = select_confirmations(campaign.configs, states)
    confirm = {cid: confirmation_jobs(campaign, plans[cid][0].config) for cid in selection.attempts}
    confirm = {cid: jobs for cid, jobs in confirm.items() if jobs}
    if confirm:
        reused += sum(1 for jobs in confirm.values() for j in jobs if j.output(out).exists())
        run(confirm)
        if only is not None and not partial:
            incomplete = incomplete or any(missing(jobs) for jobs in confirm.values())
    waiting = set(selection.pending) if campaign.confirm_draws else set()  # their group is not decided yet
    decided: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {}  # laws and merged arms
    pending: list[dict[str, Any]] = []
    resumed = 0  # draws of decided configs that shards took over from checkpoints of cut-off runs
    for cid, jobs in plans.items():
        config = jobs[0].config
        conf_jobs = confirm.get(cid, [])
        left = ([] if cid in found else missing(jobs)) + missing(conf_jobs)
        why = failed(cid, jobs + conf_jobs) if left else None
        if (left or cid in waiting) and incomplete:
            arms_done: dict[str, list[int]] = {}
            for j in jobs[1:] + conf_jobs:
                done_total = arms_done.setdefault(j.arm, [0, 0])
                done_total[0] += j.count if j.output(out).exists() else 0
                done_total[1] += j.count
            pending.append({"id": cid, "laws": jobs[0].output(out).exists(), "failed": why,
                            "draws": {arm: f"{d:,}/{t:,}" for arm, (d, t) in arms_done.items()}})
            if cid in waiting and not left:
                pending[-1]["waiting"] = "its confirmation is selected once every config of its build is decided"
            if why:  # not decided: the next run retries them, so the partial report lists it as pending
                log(f"{cid}: {why}; still pending, the next run retries them")
            continue
        if cid not in found:  # a whole run: every missing job was tried RETRIES + 1 times, so `why` is set
            results[cid] = _inconclusive(config, str(why))
            continue
        folder = found[cid]
        if conf_jobs and not missing(conf_jobs):
            folder = decide_from_folder(config, folder.jobs + conf_jobs, out, campaign, m, look=folder.look)
        d = folder.decision
        if conf_jobs and missing(conf_jobs):
            object.__setattr__(d, "repair", not_attempted(config["repair"], f"confirmation jobs failed: {why}"))
        elif cid in selection.not_attempted and campaign.confirm_draws:
            object.__setattr__(d, "repair", not_attempted(config["repair"], selection.not_attempted[cid]))
        resumed += folder.resumed
        decided[cid] = (folder.laws, folder.arms)
        results[cid] = {**d.to_dict(), "simulator_check": folder.laws.get("simulator_check"),
                        "records_detail": {arm: folder.arms[arm]["records"] for arm in ("on", "off")}}
        log(f"{cid}: {d.decision} (D {d.D:.4f}, witnesses {d.witnesses.count}, contract "
            f"{(d.contract or {}).get('status', 'unchecked')})")
    report = {"campaign": campaign.name, "seal": seal["seal"], "alpha": campaign.alpha,
              "threshold": campaign.threshold, "m": m, "confirm_m": confirmation_m(campaign.configs),
              "anytime": [look.to_dict() for look in planned_looks(campaign.draws)] if campaign.anytime else None,
              "draws": campaign.draws, "confirm_draws": campaign.confirm_draws,
              "confirmation_attempts": list(selection.attempts), "interrupted": interrupted_before,
              "jobs_reused": reused, "draws_resumed": resumed, "elapsed_s": round(time.monotonic() - start, 1),
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
    jobs: list[Job] = field(default_factory=list)  # the jobs it was decided from
    look: Look | None = None  # the anytime look it was decided at


def decide_from_folder(config: dict[str, Any], jobs: list[Job], out: Path, campaign: Campaign, m: int,
                       arms: tuple[str, ...] | None = None, look: Look | None = None) -> FolderDecision:
    """Decide `config` from its jobs' outputs in `out` (every job of the chosen arms must be done).
    `arms` limits the arms read: ("on", "off") decides a config before its repair-confirmation arms
    are done, without the repair result. `look`: an anytime look, decided with its share of the budget."""
    laws = json.loads(jobs[0].output(out).read_text())
    shards: dict[str, list[dict[str, Any]]] = {}
    for j in jobs[1:]:
        if arms is None or j.arm in arms:
            shards.setdefault(j.arm, []).append(json.loads(j.output(out).read_text()))
    merged = {arm: merge_shards(s) for arm, s in shards.items()}
    if config.get("predicates"):
        laws["predicates"] = _predicate_sets(config, laws, merged)
    return FolderDecision(decision=decide_config(config, laws, merged, campaign, m, look), laws=laws, arms=merged,
                          resumed=sum(s.get("resumed", 0) for arm in shards.values() for s in arm),
                          jobs=[jobs[0], *(j for j in jobs[1:] if arms is None or j.arm in arms)], look=look)


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

    conf = (f"; confirmation at alpha {report['alpha']} over its own m = {report['confirm_m']} (one attempt per "
            f"cause and build; attempted: {', '.join(report['confirmation_attempts']) or 'none'})"
            if report.get("confirm_draws") and "confirm_m" in report else "")
    lines = [f"# badc report: {report['campaign']}", "",
             f"Seal `{report['seal'][:16]}`; alpha {report['alpha']} family-wise over m = {report['m']}{conf}; "
             f"threshold {report['threshold']}; {report['draws']:,} draws per arm"
             + (f", {report['confirm_draws']:,} per confirmation arm" if report.get("confirm_draws") else "") + ". "
             "NOT_REJECTED means the test did not reject; it is not evidence of conformance.", ""]
    if report.get("anytime"):
        looks = report["anytime"]
        lines += [f"Anytime: {len(looks)} planned looks per config at "
                  + ", ".join(f"{lk['draws']:,}" for lk in looks) + " draws per arm, the error budget spent over "
                  "them (the last look half of it); a config stops at its first look with an eligible FAILS or "
                  "VOID.", ""]
    if "pending" in report:
        lines += [f"**Partial report: {len(report['configs'])} of {report['m']} configs decided**, each with the "
                  "whole roster's m, so these decisions are final; the pending configs are listed at the end.", ""]
    elif report.get("interrupted"):
        lines += ["**This campaign was interrupted and completed from its sealed roster** "
                  f"({report['jobs_reused']} jobs reused, {report.get('draws_resumed', 0):,} draws taken over from "
                  "checkpoints of cut-off shards).", ""]
    lines += ["D bounds the distance between the arms' returned-output laws from below; the contract column is "
              "the trace replay of the on arm, its own channel, never folded into D.", "",
              "| config | engine | build | role | decision | eligible | D | witnesses | proposed | "
              "calibration | hypothesis | repair | contract |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in report["configs"]:
        hyp = c.get("hypothesis")
        hyp_s = "-" if not hyp else (f"{hyp['id']}: {'compatible' if hyp['compatible'] else 'incompatible'}, null "
                                     f"{'rejected' if hyp['null_rejected'] else 'not rejected'}")
        rep = c.get("repair")
        rep_s = "-" if not rep else (f"{rep['id']}: not attempted" if rep.get("attempted") is False else (
            f"{rep['id']}: {'confirmed' if rep['confirmed'] else 'not confirmed'} (recurrence {rep['recurrence']:.4f}, "
            f"gap UB {rep['gap_ub']:.4f}, witness UB {rep['witness_ub']:.1e})"))
        lines.append(f"| {c['id']} | {c['engine']} | {c['build']} | {c['role']} | **{c['decision']}** | "
                     f"{'yes' if c['eligible'] else 'no'} | {f(c.get('D'))} | "
                     f"{c['witnesses']} | {f(c['exercise']['proposed'])} | {f(c['calibration']['passed'])} | "
                     f"{hyp_s} | {rep_s} | {contract_cell(c.get('contract'))} |")
    for c in report["configs"]:
        lines += ["", f"## {c['id']}: {c['decision']}", ""]
        lines += [f"- {r}" for r in c.get("reasons", [])]
        if c.get("repair"):
            lines += [f"- repair {c['repair']['id']}: {r}" for r in c["repair"].get("reasons", [])]
        if c.get("anytime"):
            lk = c["anytime"]
            lines.append(f"- decided at look {lk['look']} of {lk['of']}: {lk['draws']:,} draws per arm, "
                         f"{lk['spend']:.4g} of the budget")
        if c.get("D_event"):
            lines.append(f"- D attained on `{c['D_event']}`; crash-free returned-output D {f(c.get('D_crash_free'))} "
                         f"on `{c.get('D_crash_free_event')}`; {c.get('events')} events, B = {c.get('bounds')}")
        if c.get("witness_outcomes"):
            lines.append("- witness outcomes: " + ", ".join(f"`{y}` x{k}" for y, k in
                                                          list(c["witness_outcomes"].items())[:8]))
        contract = c.get("contract")
        lines += [f"- {line}" for line in contract_lines(contract, c["decision"])]
        if contract and contract.get("first_violation"):
            lines.append(f"- first contract violation: {contract['first_violation']['message']}")
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
                  + ", ".join(f"{arm} {n}" for arm, n in p["draws"].items())
                  + f" | {p['failed'] or p.get('waiting') or '-'} |"
                  for p in report["pending"]]
    return "\n".join(lines) + "\n"
