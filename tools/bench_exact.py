#!/usr/bin/env python
"""The exact channel's cost against the sampled protocol's (issue 48, item 6), in one run on this machine.

    .venv/bin/python tools/bench_exact.py [--paper] [--workers 2]

Times `badc run --exact-only` on the built-in campaign (and with --paper on campaigns/paper.toml, whose
builds 5.12.0, 0.3.19 and 0.3.35 must be set up), each in a fresh folder, engine start-ups included, and
sets the paper's wall time against the worker time its sampled arms took in the sealed folder
findings/paper-table-2/campaign-anytime (the shards' CPU seconds where recorded, else elapsed; every arm,
confirmation included).
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
SAMPLED = ROOT / "findings" / "paper-table-2" / "campaign-anytime" / "shards"


def exact_only(campaign: list[str], workers: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        t = time.monotonic()
        subprocess.run([str(ROOT / ".venv" / "bin" / "badc"), "run", *campaign, "--exact-only", "--out", out,
                        "--workers", str(workers)], cwd=ROOT, capture_output=True)
        return time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paper", action="store_true", help="also the paper's 26 Table 2 configs")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    builtin = exact_only([], args.workers)
    print(f"built-in campaign, --exact-only: {builtin:.1f} s wall ({args.workers} workers)")
    if args.paper:
        paper = exact_only([str(ROOT / "campaigns" / "paper.toml")], args.workers)
        shards = [json.loads(p.read_text()) for p in SAMPLED.glob("*/*.json")]
        cpu = sum(s.get("cpu_s") or s["elapsed_s"] for s in shards)
        print(f"Table 2 (26 configs), --exact-only: {paper:.1f} s wall ({args.workers} workers); the sampled "
              f"protocol's {len(shards)} shards: {cpu / 3600:.1f} worker-hours (CPU where recorded, else elapsed); "
              f"ratio {cpu / (paper * args.workers):,.0f} (worker-seconds against the exact run's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
