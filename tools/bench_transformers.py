"""Probe and replay cost on transformers: draws per second unprobed, probed at level counts, and at
level full with the trace replayed (D1-D3, the level campaigns use), for plain sampling and for
classifier-free guidance, speculation off and on. Ratios within one run.

Run under a transformers build: .venvs/transformers-5.24.0/bin/python tools/bench_transformers.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from badc_replay.engines import transformers as tf

N = 400
SHORT = 50


def rate(fn, *args, **kwargs) -> float:
    t = time.perf_counter()
    fn(*args, **kwargs)
    return N / (time.perf_counter() - t)


def arm_rate(c: tf.TransformersConfig, arm: str, **kwargs) -> float:
    """Draws/s of `collect` without its one-time set-up (model load, instrumenting): the difference
    of a long and a short run."""
    def elapsed(n: int) -> float:
        t = time.perf_counter()
        tf.collect(c, arm, n, 1, **kwargs)
        return time.perf_counter() - t

    short = elapsed(SHORT)
    return (N - SHORT) / (elapsed(N) - short)


def draws(h: tf.Harness) -> None:
    for i in range(N):
        h.draw(i)


def main() -> None:
    print(f"transformers {tf.engine_version()}, {N} draws per cell")
    print("| config | arm | unprobed draws/s | counts | full + replay |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, gen in (("plain", {}), ("guidance 1.5", {"guidance_scale": 1.5})):
            c = tf.config_from_dict({"id": "bench", "generation": gen})
            for arm in ("off", "on"):
                h = tf.Harness(c, speculative=arm == "on")
                bare = rate(draws, h)
                counts = arm_rate(c, arm, level="counts")
                full = arm_rate(c, arm, trace_path=str(Path(tmp) / f"{arm}.badc"), level="full")
                print(f"| {name} | {arm} | {bare:.0f} | {counts / bare:.2f} | {full / bare:.2f} |")


if __name__ == "__main__":
    main()
