#!/usr/bin/env python
"""Benchmark: local worker scaling and the cost of probes, on llama_cpp's tiny model.

1. The same campaign (two configs, 40,000 draws per arm in shards of 10,000) with 1 and with 2 local
   workers: wall time ratio (issue 6: 2 workers on 2 cores should come close to twice one).
2. Draws per second of one arm with the probe at each level against no probe.

    .venv/bin/python tools/bench_workers.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from badc_check.builds import build_for  # noqa: E402
from badc_check.campaign import load_campaign, run_campaign  # noqa: E402

CAMPAIGN = """
[campaign]
name = "bench"
draws = 40000
shard = 10000
seed = 1
[defaults]
engine = "llama_cpp"
build = "0.3.36"
drafter = { method = "prompt_lookup", num_pred_tokens = 4, max_ngram_size = 2 }
sampling = { temperature = 1.0 }
[[config]]
id = "N"
[[config]]
id = "M"
processors = [{ name = "min_tokens", min_tokens = 3 }]
"""

PROBE = textwrap.dedent("""
    import sys, time
    from badc_replay.arms import collect
    from badc_replay.engines.llama_cpp import ENGINE, Harness
    cfg = ENGINE.parse_config({"id": "P", "processors": [{"name": "min_tokens", "min_tokens": 3}],
        "sampling": {"temperature": 1.0},
        "drafter": {"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2}})
    n = 10000
    h = Harness(cfg, speculative=True)
    t = time.perf_counter()
    for i in range(n):
        h.call(i)
    base = n / (time.perf_counter() - t)
    print(f"no probe: {base:,.0f} draws/s")
    for level in ("counts", "calls", "full"):
        t = time.perf_counter()
        collect(ENGINE, cfg, "on", n, 1, trace_path=sys.argv[1] + level if level != "counts" else None, level=level)
        rate = n / (time.perf_counter() - t)
        print(f"probe {level:6}: {rate:,.0f} draws/s ({rate / base:.2f} of unprobed; includes trace replay)")
""")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(CAMPAIGN)
        times = {}
        for workers in (1, 2):
            t = time.perf_counter()
            run_campaign(load_campaign(path), Path(tmp) / f"w{workers}", workers=workers, log=lambda m: None,
                         plots=False)
            times[workers] = time.perf_counter() - t
            print(f"{workers} worker(s): {times[workers]:.1f} s")
        print(f"speed-up 2 vs 1 workers: {times[1] / times[2]:.2f}x")
        python = str(build_for("llama_cpp", "0.3.36").python)
        subprocess.run([python, "-c", PROBE, str(Path(tmp) / "t-")], check=True)


if __name__ == "__main__":
    main()
