"""`badc run`: read a campaign, seal it, run one worker per config under its build's interpreter, decide,
confirm repairs, and write report.json, report.md and the traces.

Campaign file: DESIGN.md ("Campaign file"), plus an optional `[defaults]` table merged into every
`[[config]]`. Workers exist for llama_cpp so far; configs of other engines are reported as
INCONCLUSIVE with the reason, never silently dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from badc_check.builds import build_for
from badc_check.channels import RecordArm
from badc_check.confirmation import confirm_repair
from badc_check.decide import INCONCLUSIVE, Arm, Config, ConfigDecision, decide

ENGINES_WITH_WORKERS = {"llama_cpp"}
ROLES = ("probe", "negative-control", "positive-control")
BUILTIN = Path(__file__).resolve().parents[1] / "campaigns" / "builtin.toml"


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
        return Campaign(path=path, name=str(camp.get("name", Path(path).stem)), alpha=float(camp.get("alpha", 0.05)),
                        threshold=float(camp.get("threshold", 0.01)),
                        draws=int(draws if draws is not None else camp.get("draws", 200_000)),
                        seed=int(camp.get("seed", 0)),
                        confirm_draws=int(confirm_draws if confirm_draws is not None else camp.get("confirm_draws", 0)),
                        configs=configs)
    except (TypeError, ValueError) as e:
        raise CampaignError(f"{path}: [campaign]: {e}") from None


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
    else:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(seal, indent=1))
        os.replace(tmp, path)
    return seal


def _run_worker(config: dict[str, Any], campaign: Campaign, out: Path, log: Any) -> dict[str, Any]:
    build = build_for(config["engine"], config["build"])
    cfg_dir = out / "configs"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = cfg_dir / f"{config['id']}.json"
    cfg_path.write_text(json.dumps(config))
    counts_path = out / f"counts-{config['id']}.json"
    if counts_path.exists():  # collected by an earlier, interrupted run under the same seal
        log(f"{config['id']}: reusing {counts_path.name}")
        return json.loads(counts_path.read_text())
    cmd = [str(build.python), "-m", "badc_replay.worker", str(cfg_path), "--draws", str(campaign.draws),
           "--seed", str(campaign.seed), "--out", str(out), "--confirm", str(campaign.confirm_draws)]
    log(f"{config['id']}: worker started ({build.name}, {campaign.draws} draws per arm)")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "n_ctx" not in line and line.strip():
            log(line.rstrip())
    proc.wait()
    if proc.returncode != 0 or not counts_path.exists():
        raise RuntimeError(f"{config['id']}: worker exited with {proc.returncode}")
    return json.loads(counts_path.read_text())


def _decide_entry(entry: dict[str, Any], campaign: Campaign, m: int) -> ConfigDecision:
    hyp = entry.get("hypothesis")
    rec = entry.get("records", {})

    def record_arm(arm: str) -> RecordArm | None:
        r = rec.get(arm)
        if r is None:
            return None
        return RecordArm(r["draws"], r["mismatch"], {int(k): v for k, v in r["positions"].items()})

    cfg = Config(
        id=entry["id"], engine=entry["engine"], build=entry["build"], role=entry.get("role", "probe"),
        on=Arm(entry["on"], entry["violations"]["on"], entry["exercise"]["proposed"], entry["exercise"]["accepted"]),
        off=Arm(entry["off"], entry["violations"]["off"]), reference=entry["reference"],
        predicates={k: frozenset(v) for k, v in entry.get("predicates", {}).items()},
        hypothesis=(hyp["id"], hyp["law"]) if hyp else None,
        records_status=rec.get("status", "not_returned"), records_on=record_arm("on"), records_off=record_arm("off"))
    d = decide(cfg, alpha=campaign.alpha, m=m, threshold=campaign.threshold)
    object.__setattr__(d, "contract", entry.get("contract"))
    conf = entry.get("confirmation")
    if conf:
        fam = cfg.family()
        frozen = [f"A_H({hyp['id']})"] if hyp else [d.channel_s.argmax_crash_free]
        n_conf = sum(1 for e in campaign.configs if e.get("repair"))
        r = confirm_repair(conf["id"], fam, frozen, entry["reference"], cfg.predicates, conf["off-confirm"]["outcomes"],
                           conf["on-confirm"]["outcomes"], conf["repaired"]["outcomes"],
                           proposed_on=conf["on-confirm"]["proposed"], proposed_repaired=conf["repaired"]["proposed"],
                           alpha=campaign.alpha, m=max(n_conf, 1))
        object.__setattr__(d, "repair", r)
    return d


def _inconclusive(config: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"id": config["id"], "engine": config["engine"], "build": config["build"],
            "role": config.get("role", "probe"), "decision": INCONCLUSIVE, "eligible": False, "D": None,
            "witnesses": 0, "draws": {"on": 0, "off": 0}, "crashes": {"on": 0, "off": 0},
            "exercise": {"proposed": None, "accepted": None}, "calibration": {"passed": None}, "hypothesis": None,
            "records": {"status": "incomplete", "failed": False}, "repair": None, "contract": None,
            "reasons": [reason]}


def run_campaign(campaign: Campaign, out: str | Path, *, workers: int = 2, log: Any = None) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    seal = check_seal(campaign, out)
    start = time.monotonic()
    runnable = [c for c in campaign.configs if c["engine"] in ENGINES_WITH_WORKERS]
    results: dict[str, dict[str, Any]] = {}
    for c in campaign.configs:
        if c["engine"] not in ENGINES_WITH_WORKERS:
            results[c["id"]] = _inconclusive(c, f"no campaign worker for engine {c['engine']!r} yet")
    m = len(campaign.configs)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {c["id"]: pool.submit(_run_worker, c, campaign, out, log) for c in runnable}
        for cid, fut in futures.items():
            try:
                entry = fut.result()
            except (RuntimeError, LookupError) as e:
                results[cid] = _inconclusive(next(c for c in runnable if c["id"] == cid), str(e))
                log(f"{cid}: {e}")
                continue
            d = _decide_entry(entry, campaign, m)
            results[cid] = {**d.to_dict(), "simulator_check": entry.get("simulator_check")}
            log(f"{cid}: {d.decision} (D {d.D:.4f}, witnesses {d.witnesses.count})")
    report = {"campaign": campaign.name, "seal": seal["seal"], "alpha": campaign.alpha,
              "threshold": campaign.threshold, "m": m, "draws": campaign.draws,
              "elapsed_s": round(time.monotonic() - start, 1),
              "configs": [results[c["id"]] for c in campaign.configs]}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(report_markdown(report))
    return report


def report_markdown(report: dict[str, Any]) -> str:
    def f(v: Any) -> str:
        return "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))

    lines = [f"# badc report: {report['campaign']}", "",
             f"Seal `{report['seal'][:16]}`; alpha {report['alpha']} family-wise over m = {report['m']}; "
             f"threshold {report['threshold']}; {report['draws']} draws per arm. "
             "NOT_REJECTED means the test did not reject; it is not evidence of conformance.", "",
             "| config | engine | build | role | decision | eligible | D | D returned | witnesses | proposed | "
             "calibration | hypothesis | repair |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in report["configs"]:
        hyp = c.get("hypothesis")
        hyp_s = "-" if not hyp else f"{hyp['id']}: {'compatible' if hyp['compatible'] else 'incompatible'}"
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
        if c.get("witness_outcomes"):
            lines.append("- witness outcomes: " + ", ".join(f"`{y}` x{k}" for y, k in
                                                          list(c["witness_outcomes"].items())[:8]))
        contract = c.get("contract")
        if contract and contract.get("first_violation"):
            fv = contract["first_violation"]
            lines.append(f"- contract: {contract['violations']} violating calls in {contract['violating_requests']} "
                         f"of {contract['requests']} requests; first: {fv['message']}")
    return "\n".join(lines) + "\n"
