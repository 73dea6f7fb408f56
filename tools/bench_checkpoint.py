#!/usr/bin/env python
"""Cost of shard checkpoints (badc_replay/arms.py): one llama_cpp worker shard of N draws (parity
processor, prompt lookup, level calls with replay) with the default checkpoint interval (30 s: none in
so short a shard) and with a checkpoint after every draw (BADC_CHECKPOINT_S=0), REPEAT times each,
alternating. Prints the median times and the cost of one checkpoint.

    .venv/bin/python tools/bench_checkpoint.py   (needs the llama_cpp-0.3.36 build)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from badc_check.builds import load_builds  # noqa: E402

N = 4000
REPEAT = 3
CONFIG = {"id": "B", "engine": "llama_cpp", "build": "0.3.36", "model": "tiny", "prompt": "abcdabcdab",
          "max_new_tokens": 4, "drafter": {"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2},
          "sampling": {"temperature": 1.0}, "processors": [{"name": "parity"}]}


def main() -> None:
    python = str(load_builds()["llama_cpp-0.3.36"].python)
    times: dict[str, list[float]] = {"default": [], "every draw": []}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "c.json"
        cfg.write_text(json.dumps(CONFIG))
        for rep in range(REPEAT):
            for label, interval in (("default", None), ("every draw", "0")):
                out = Path(tmp) / f"{label.replace(' ', '-')}{rep}"
                env = dict(os.environ)
                env.pop("BADC_CHECKPOINT_S", None)
                if interval is not None:
                    env["BADC_CHECKPOINT_S"] = interval
                subprocess.run([python, "-m", "badc_replay.worker", str(cfg), "--out", str(out), "--arm", "on",
                                "--count", str(N), "--seed", "3", "--level", "calls"], check=True, env=env,
                               capture_output=True)
                times[label].append(json.loads((out / "shards" / "B" / "on-0.json").read_text())["elapsed_s"])
    base, every = statistics.median(times["default"]), statistics.median(times["every draw"])
    print(f"{N:,} draws: {base:.2f} s without checkpoints, {every:.2f} s with one after every draw; "
          f"one checkpoint costs {1000 * (every - base) / N:.2f} ms")


if __name__ == "__main__":
    main()
