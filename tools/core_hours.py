#!/usr/bin/env python
"""Worker core-hours of campaign folders, from their shards: per engine and stage (S1-S2: the off and on
arms; S3: off-confirm, on-confirm, repaired), the draws, the elapsed core-hours (each shard's worker wall
time, which a machine shared with other work inflates) and the CPU core-hours (each shard's `cpu_s`,
recorded since 2026-12-04; shards written before have none, and the table says how many draws lack it).

With `--rates RUN`: also what the folders' draws would cost at the CPU seconds per draw of another run
of the same configs (a short one, on this machine alone), per config and arm, each of RUN's shards less
one worker start-up (`--startup ENGINE=SECONDS`, measured with a shard of a few draws): how a run made
over several sessions, on other machines or beside other work, compares with this machine's speed.

    .venv/bin/python tools/core_hours.py findings/rq3/campaign-1 [FOLDER ...]
    .venv/bin/python tools/core_hours.py findings/paper-table-2/campaign-anytime --rates /tmp/t2 \
        --startup transformers=4.4 --startup llama_cpp=0.1
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
        shards = _shards(folder)
        if not shards:
            raise SystemExit(f"core_hours: {folder} holds no shards (shards/ID/ARM-START.json)")
        for engine, s in shards:
            row = rows[engine, STAGES.get(s["arm"], s["arm"]), s["arm"]]
            own = s["count"] - s.get("resumed", 0)
            row[0] += own
            row[1] += s["elapsed_s"]
            if s.get("cpu_s") is None:
                row[3] += own
            else:
                row[2] += s["cpu_s"]
    return rows


def _shards(folder: Path) -> list[tuple[str, dict]]:
    """(engine, shard) for every shard of a run folder."""
    engines: dict[str, str] = {}
    out = []
    for path in sorted((folder / "shards").glob("*/*.json")):
        s = json.loads(path.read_text())
        if s["id"] not in engines:
            engines[s["id"]] = json.loads((folder / "configs" / f"{s['id']}.json").read_text())["engine"]
        out.append((engines[s["id"]], s))
    return out


def at_rates(folders: list[Path], run: Path, startup: dict[str, float]) -> dict[tuple[str, str], float]:
    """(engine, stage) -> CPU seconds the folders' own draws would take at `run`'s CPU seconds per draw
    (per config and arm; each of its shards less one start-up of its engine). A config and arm that `run`
    did not draw is an error naming it."""
    cpu: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for engine, s in _shards(run):
        if s.get("cpu_s") is not None:
            cpu[s["id"], s["arm"]][0] += s["cpu_s"] - startup.get(engine, 0.0)
            cpu[s["id"], s["arm"]][1] += s["count"]
    est: dict[tuple[str, str], float] = defaultdict(float)
    for folder in folders:
        for engine, s in _shards(folder):
            seconds, draws = cpu.get((s["id"], s["arm"]), (0.0, 0))
            if not draws:
                raise SystemExit(f"core_hours: {run} has no CPU time for {s['id']} {s['arm']}: draw that config "
                                 "and arm there first")
            est[engine, STAGES.get(s["arm"], s["arm"])] += (s["count"] - s.get("resumed", 0)) * seconds / draws
    return est


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
    ap.add_argument("--rates", type=Path, metavar="RUN", help="a run of the same configs to take CPU per draw from")
    ap.add_argument("--startup", action="append", default=[], metavar="ENGINE=SECONDS",
                    help="one worker start-up of ENGINE, taken off each of RUN's shards")
    args = ap.parse_args(argv)
    print(table(tally(args.folders)), end="")
    if args.rates:
        try:
            startup = {k: float(v) for k, v in (item.split("=", 1) for item in args.startup)}
        except ValueError:
            ap.error(f"--startup takes ENGINE=SECONDS, e.g. transformers=4.4, not {args.startup!r}")
        est = at_rates(args.folders, args.rates, startup)
        print(f"\nAt {args.rates}'s CPU seconds per draw:\n\n| engine | stage | CPU core-hours |\n|---|---|---|")
        for (engine, stage), sec in sorted(est.items()):
            print(f"| {engine} | {stage} | {sec / 3600:.2f} |")
        print(f"| all | | {sum(est.values()) / 3600:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
