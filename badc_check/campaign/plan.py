"""Planning: a config's work as jobs (its exact laws, then shards of draws per arm), each with the file it
writes and the worker command that writes it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from badc_check.campaign.spec import Campaign, needs_pilot
from badc_check.looks import planned_looks
from badc_replay.registry import get_engine


@dataclass
class Job:
    config: dict[str, Any]
    kind: str  # laws (or the pilot, for a model without an exact law) | exact | shard
    arm: str = ""
    start: int = 0
    count: int = 0
    level: str = "calls"
    repair: str | None = None
    soundness: int = 0  # exact: leaves of each enumeration re-run (the soundness pass)
    witness: int = 0  # exact: on-arm draws traced where mu differs from P (the first contract violation)
    tol: float | None = None  # exact: the campaign's tolerance, which says where mu differs

    @property
    def cid(self) -> str:
        return self.config["id"]

    @property
    def label(self) -> str:
        return self.kind if self.kind in ("laws", "exact") else f"shard {self.arm} {self.start}"

    def output(self, out: Path) -> Path:
        if self.kind in ("laws", "exact"):
            return out / self.kind / f"{self.cid}.json"
        return out / "shards" / self.cid / f"{self.arm}-{self.start}.json"

    def command(self, python: str, cfg_path: Path, out: Path, seed: int, seal: str = "") -> list[str]:
        cmd = [python, "-m", "badc_replay.worker", str(cfg_path), "--out", str(out), "--seal", seal]
        if self.kind == "exact":
            witness = ["--witness", str(self.witness), "--tol", repr(self.tol)] if self.tol is not None else []
            return [*cmd, "--exact", "--soundness", str(self.soundness), *witness, "--seed", str(seed)]
        if self.kind == "laws":  # with a count: the sealed pilot of a model without an exact law
            pilot = ["--seed", str(seed), "--count", str(self.count)] if self.count else []
            return [*cmd, "--laws", *pilot]
        cmd += ["--arm", self.arm, "--start", str(self.start), "--count", str(self.count), "--seed", str(seed),
                "--level", self.level]
        return cmd + (["--repair", self.repair] if self.repair else [])


@dataclass
class Chain:
    """Jobs for one worker process, one engine start for all: consecutive shards of one arm (under
    --anytime, one shard per look), which begins no further shard once `stop` exists (the runner's mark
    that the arm's draws are no longer needed); or the laws of configs on one model and build."""
    jobs: list[Job]
    stop: Path | None = None

    @property
    def kind(self) -> str:
        return self.jobs[0].kind

    @property
    def config(self) -> dict[str, Any]:
        return self.jobs[0].config

    @property
    def cid(self) -> str:
        return self.jobs[0].cid

    @property
    def arm(self) -> str:
        return self.jobs[0].arm

    @property
    def start(self) -> int:
        return self.jobs[0].start

    @property
    def count(self) -> int:
        return sum(j.count for j in self.jobs)

    @property
    def label(self) -> str:
        if self.kind in ("laws", "exact"):
            return f"{self.kind} of {', '.join(j.cid for j in self.jobs)}"
        return f"shards {self.arm} {', '.join(str(j.start) for j in self.jobs)}"

    def command(self, python: str, cfg_path: Path, out: Path, seed: int, seal: str = "") -> list[str]:
        cmd = self.jobs[0].command(python, cfg_path, out, seed, seal)
        if self.kind in ("laws", "exact"):  # the other configs' files lie beside the first's
            return [*cmd[:4], *(str(cfg_path.parent / f"{j.cid}.json") for j in self.jobs[1:]), *cmd[4:]]
        at = cmd.index("--start")
        del cmd[at:at + 4]  # --start S --count N
        chain = [*cmd, "--chain", ",".join(f"{j.start}:{j.count}" for j in self.jobs)]
        return chain if self.stop is None else [*chain, "--stop", str(self.stop)]


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
    """The laws (or the sealed pilot of a model without them), then the off and on arms (stages S1-S2)."""
    level = get_engine(config["engine"]).trace_level
    pilot = campaign.pilot if needs_pilot(config) else 0
    return [Job(config, "laws", "off-pilot" if pilot else "", count=pilot),
            *_arm_jobs(campaign, config, "off", campaign.draws, level, looks=campaign.anytime),
            *_arm_jobs(campaign, config, "on", campaign.draws, level, looks=campaign.anytime)]


def exact_job(campaign: Campaign, config: dict[str, Any]) -> Job:
    """The exact channel's laws of a config; with no draws (`exact = "only"`), the witness trace where mu
    differs from P (beside draws, the sampled on-arm's traces name the first violation)."""
    witness = campaign.exact_witness if campaign.exact == "only" else 0
    return Job(config, "exact", soundness=campaign.exact_soundness, witness=witness, tol=campaign.exact_tol)


def confirmation_jobs(campaign: Campaign, config: dict[str, Any]) -> list[Job]:
    """Fresh off and on arms and the repaired arm (stage S3), for a config selected for confirmation."""
    if not (campaign.confirm_draws and config.get("repair")):
        return []
    engine = get_engine(config["engine"])
    n, level = campaign.confirm_draws, engine.trace_level
    # untraced where nothing is read from the trace; traced where the engine returns records, whose
    # log-probabilities give Delta B's importance weights (badc_check/delta_b.py)
    fresh = level if engine.returns_records(engine.parse_config(config)) else "counts"
    looks = campaign.confirm_anytime  # recurrence is judged on both fresh arms' prefixes at the looks
    return [*_arm_jobs(campaign, config, "off-confirm", n, fresh, looks=looks),
            *_arm_jobs(campaign, config, "on-confirm", n, fresh, looks=looks),
            *_arm_jobs(campaign, config, "repaired", n, level, config["repair"])]


def plan(campaign: Campaign, config: dict[str, Any]) -> list[Job]:
    """Every job a config can have: discovery, and confirmation if it is selected for it."""
    return discovery_jobs(campaign, config) + confirmation_jobs(campaign, config)
