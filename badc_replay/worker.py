"""Campaign worker: runs under an engine build's interpreter, computes the exact laws of one
configuration, collects its arms with probes on, replays the on-arm traces, and writes one
COUNTS.json config entry (docs/counts.md) that badc_check turns into a decision.

    python -m badc_replay.worker CONFIG.json --draws N --seed S --out DIR [--repaired N]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def run_config(config: dict[str, Any], *, draws: int, campaign_seed: int, out_dir: str | Path,
               level: str = "calls", repaired_draws: int = 0, confirm_draws: int = 0,
               log: Any = None) -> dict[str, Any]:
    engine = config["engine"]
    mod = importlib.import_module(f"badc_replay.engines.{engine}")
    cfg = mod.LlamaConfig.from_dict(config) if engine == "llama_cpp" else None
    if cfg is None:
        raise NotImplementedError(f"engine {engine!r}: no campaign worker yet")
    out = Path(out_dir)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    say = log or (lambda msg: None)
    t0 = time.monotonic()
    ref = mod.reference_law(cfg)
    say(f"{cfg.id}: P enumerated ({len(ref.law)} outcomes, {ref.paths} paths, {time.monotonic() - t0:.1f} s)")
    entry: dict[str, Any] = {"id": cfg.id, "engine": engine, "build": mod._version(),
                             "role": config.get("role", "probe"), "reference": ref.law}
    hyp = config.get("hypothesis")
    if hyp:
        law = mod.hypothesis_law(cfg, hyp)
        entry["hypothesis"] = {"id": hyp, "law": law.law}
        entry["simulator_check"] = mod.simulator_check(cfg)
    arms = {}
    for arm in ("off", "on"):
        t = time.monotonic()
        arms[arm] = mod.collect(cfg, arm, draws, campaign_seed, trace_path=str(out / "traces" / f"{cfg.id}-{arm}.badc"),
                                level=level)
        say(f"{cfg.id}: arm {arm}: {draws} draws in {time.monotonic() - t:.1f} s "
            f"({draws / max(time.monotonic() - t, 1e-9):.0f}/s), proposed {arms[arm].proposed}")
    entry["on"], entry["off"] = arms["on"].outcomes, arms["off"].outcomes
    entry["exercise"] = {"proposed": arms["on"].proposed, "accepted": arms["on"].accepted}
    entry["violations"] = {"on": arms["on"].violations, "off": arms["off"].violations}
    entry["contract"] = arms["on"].contract
    known = set(ref.law) | set(entry["on"]) | set(entry["off"]) | set(entry.get("hypothesis", {}).get("law", {}))
    entry["predicates"] = {name: sorted(y for y in known if mod.predicate(name, cfg)(y))
                           for name in config.get("predicates", [])}
    if arms["on"].records is not None and arms["off"].records is not None:
        entry["records"] = {"status": "complete", "on": arms["on"].records, "off": arms["off"].records}
    else:
        entry["records"] = {"status": "not_returned"}
    if repaired_draws and config.get("repair"):
        t = time.monotonic()
        rep = mod.collect(cfg, "repaired", repaired_draws, campaign_seed,
                          trace_path=str(out / "traces" / f"{cfg.id}-repaired.badc"), level=level,
                          repair=config["repair"])
        entry["repaired"] = {"id": config["repair"], "outcomes": rep.outcomes, "proposed": rep.proposed,
                             "violations": rep.violations, "contract": rep.contract}
        say(f"{cfg.id}: repaired arm: {repaired_draws} draws in {time.monotonic() - t:.1f} s")
    if confirm_draws and config.get("repair"):
        # Confirmation: fresh seeds (arm names of their own) for off, unrepaired and repaired arms.
        fresh = {}
        for arm in ("off-confirm", "on-confirm", "repaired"):
            t = time.monotonic()
            fresh[arm] = mod.collect(cfg, arm, confirm_draws, campaign_seed, level="counts",
                                     repair=config["repair"] if arm == "repaired" else None)
            say(f"{cfg.id}: confirmation arm {arm}: {confirm_draws} draws in {time.monotonic() - t:.1f} s")
        entry["confirmation"] = {"id": config["repair"],
                                 **{arm: {"outcomes": r.outcomes, "proposed": r.proposed} for arm, r in fresh.items()}}
    return entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m badc_replay.worker", description=__doc__.splitlines()[0])
    ap.add_argument("config", help="one campaign config as a JSON file")
    ap.add_argument("--draws", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repaired", type=int, default=0, help="draws of the repaired arm (discovery)")
    ap.add_argument("--confirm", type=int, default=0, help="draws per arm of repair confirmation (fresh seeds)")
    ap.add_argument("--level", default="calls", choices=("counts", "calls", "full"))
    args = ap.parse_args(argv)
    config = json.loads(Path(args.config).read_text())
    entry = run_config(config, draws=args.draws, campaign_seed=args.seed, out_dir=args.out, level=args.level,
                       repaired_draws=args.repaired, confirm_draws=args.confirm,
                       log=lambda m: print(m, file=sys.stderr, flush=True))
    path = Path(args.out) / f"counts-{entry['id']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry))
    os.replace(tmp, path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
