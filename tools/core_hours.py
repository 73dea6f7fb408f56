#!/usr/bin/env python
"""Worker core-hours of campaign folders, from their shards: per engine and stage (S1-S2: the off and on
arms; S3: off-confirm, on-confirm, repaired), the draws, the elapsed core-hours (each shard's worker wall
time, which a machine shared with other work inflates) and the CPU core-hours (each shard's `cpu_s`,
recorded since 2026-12-04; shards written before have none, and the table says how many draws lack it).

    .venv/bin/python tools/core_hours.py findings/rq3/campaign-1 [FOLDER ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

STAGES = {"off": "S1-S2", "on": "S1-S2", "off-confirm": "S3", "on-confirm": "S3", "repaired": "S3"}


def tally(folders: list[Path]) -> dict[tuple[str, str, str], list[float]]:
    """(engine, stage, arm) -> [draws, elapsed s, cpu s, draws without cpu_s]; a shard's own draws
    (the ones a checkpoint handed over were timed by the run before, and are not counted twice)."""
    rows: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0])
    for folder in folders:
        shards = sorted((folder / "shards").glob("*/*.json"))
        if not shards:
            raise SystemExit(f"core_hours: {folder} holds no shards (shards/ID/ARM-START.json)")
        for path in shards:
            s = json.loads(path.read_text())
            engine = json.loads((folder / "configs" / f"{s['id']}.json").read_text())["engine"]
            row = rows[engine, STAGES.get(s["arm"], s["arm"]), s["arm"]]
            own = s["count"] - s.get("resumed", 0)
            row[0] += own
            row[1] += s["elapsed_s"]
            if s.get("cpu_s") is None:
                row[3] += own
            else:
                row[2] += s["cpu_s"]
    return rows


def table(rows: dict[tuple[str, str, str], list[float]]) -> str:
    lines = ["| engine | stage | arm | draws | elapsed core-hours | CPU core-hours | draws without CPU time |",
             "|---|---|---|---|---|---|---|"]
    total = [0, 0.0, 0.0, 0]
    for (engine, stage, arm), (draws, elapsed, cpu, untimed) in sorted(rows.items()):
        lines.append(f"| {engine} | {stage} | {arm} | {draws:,} | {elapsed / 3600:.2f} | "
                     f"{cpu / 3600:.2f} | {untimed:,} |")
        total = [a + b for a, b in zip(total, (draws, elapsed, cpu, untimed), strict=True)]
    lines.append(f"| all | | | {total[0]:,} | {total[1] / 3600:.2f} | {total[2] / 3600:.2f} | {total[3]:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, metavar="FOLDER", help="a `badc run --out` folder")
    args = ap.parse_args(argv)
    print(table(tally(args.folders)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
