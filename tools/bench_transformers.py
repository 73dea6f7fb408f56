"""Probe and replay cost on transformers: draws per second unprobed, probed at level counts, and at
level full with the trace replayed (D1-D3, the level campaigns use), for plain sampling, classifier-free
guidance and the SynthID watermark, speculation off and on. Ratios within one run; each cell is measured REPEAT
times back to back (unprobed, counts, full) and the median ratio is shown, since the machines are shared.

Run under a transformers build: .venvs/transformers-5.24.0/bin/python tools/bench_transformers.py [NAME ...]
(NAME: plain, guidance, synthid; default all)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from badc_replay.arms import collect
from badc_replay.engines import transformers as tf

N = 400
SHORT = 50
REPEAT = 3
SYNTHID = {"type": "synthid", "keys": [654, 400, 836, 123, 340, 443, 597, 160], "ngram_len": 2}
CONFIGS = {"plain": {}, "guidance": {"guidance_scale": 1.5}, "synthid": {"watermarking_config": SYNTHID}}


def rate(fn, *args, **kwargs) -> float:
    t = time.perf_counter()
    fn(*args, **kwargs)
    return N / (time.perf_counter() - t)


def arm_rate(c: tf.TransformersConfig, arm: str, **kwargs) -> float:
    """Draws/s of `collect` without its one-time set-up (model load, instrumenting): the difference
    of a long and a short run."""
    def elapsed(n: int) -> float:
        t = time.perf_counter()
        collect(tf.ENGINE, c, arm, n, 1, **kwargs)
        return time.perf_counter() - t

    short = elapsed(SHORT)
    return (N - SHORT) / (elapsed(N) - short)


def draws(h: tf.Harness) -> None:
    for i in range(N):
        h.draw(i)


def main() -> None:
    unknown = sorted(set(sys.argv[1:]) - set(CONFIGS))
    if unknown:
        sys.exit(f"bench_transformers: unknown config {', '.join(unknown)} (known: {', '.join(CONFIGS)})")
    print(f"transformers {tf.ENGINE.version()}, {N} draws per cell")
    print("| config | arm | unprobed draws/s | counts | full + replay |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in sys.argv[1:] or CONFIGS:
            gen = CONFIGS[name]
            c = tf.ENGINE.parse_config({"id": "bench", "generation": gen})
            for arm in ("off", "on"):
                h = tf.Harness(c, speculative=arm == "on")
                for i in range(SHORT):  # warm-up, as the short run does for the probed rates
                    h.draw(i)
                bares, counts, full = [], [], []
                for _ in range(REPEAT):
                    bares.append(rate(draws, h))
                    counts.append(arm_rate(c, arm, level="counts") / bares[-1])
                    full.append(arm_rate(c, arm, trace_path=str(Path(tmp) / f"{arm}.badc"), level="full") / bares[-1])
                print(f"| {name} | {arm} | {statistics.median(bares):.0f} | {statistics.median(counts):.2f} | "
                      f"{statistics.median(full):.2f} |")


if __name__ == "__main__":
    main()
