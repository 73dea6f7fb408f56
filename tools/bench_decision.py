#!/usr/bin/env python
"""Benchmark: one full channel-S decision for a family of >= 10,000 events at 200,000 draws per arm.

Also reports what anytime validity costs: the width of the confidence-sequence bounds against
fixed-n Clopper-Pearson at the same per-bound tail. Results go to BENCHMARKS.md by hand.

    .venv/bin/python tools/bench_decision.py
"""

from __future__ import annotations

import itertools
import platform
import time

import numpy as np

from badc_check.bounds import cp_lower, cp_upper, cs_lower, cs_upper
from badc_check.decide import Arm, Config, decide
from badc_check.events import EventFamily


def big_law(vocab: int = 17, horizon: int = 3, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    keys = [" ".join(map(str, t)) + "|length" for t in itertools.product(range(vocab), repeat=horizon)]
    p = rng.dirichlet(np.ones(len(keys)))
    return dict(zip(keys, p.tolist(), strict=True))


def main() -> None:
    law = big_law()
    rng = np.random.default_rng(1)
    n = 200_000
    keys = list(law)
    p = np.array(list(law.values()))
    on = dict(zip(keys, rng.multinomial(n, p).tolist(), strict=True))
    off = dict(zip(keys, rng.multinomial(n, p).tolist(), strict=True))
    t0 = time.perf_counter()
    fam = EventFamily.build(law)
    t_family = time.perf_counter() - t0
    cfg = Config("bench", Arm(on, proposed=1), Arm(off), reference=law)
    times, times_any = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        d = decide(cfg, family=fam)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        decide(cfg, family=fam, anytime=True)
        times_any.append(time.perf_counter() - t0)
    print(f"machine: {platform.machine()}, {platform.python_version()}, numpy {np.__version__}")
    print(f"family: {len(fam)} events ({len(fam.base)} base), B = {d.bounds}, {n} draws per arm, "
          f"{len(law)} outcomes")
    print(f"family build: {t_family * 1000:.0f} ms")
    print(f"decide (fixed-n CP): median {np.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms "
          f"-> {d.decision}, D = {d.D:.5f}")
    print(f"decide (anytime CS): median {np.median(times_any) * 1000:.0f} ms, min {min(times_any) * 1000:.0f} ms")
    tail = 0.05 / (26 * d.bounds)
    print(f"\nwidth of CS vs CP at tail {tail:.2e} (alpha 0.05, m 26, this B), n = {n}:")
    for rate in (1e-4, 1e-3, 0.01, 0.1, 0.5):
        k = round(rate * n)
        w_cp = float(cp_upper(k, n, tail) - cp_lower(k, n, tail))
        w_cs = float(cs_upper(k, n, tail) - cs_lower(k, n, tail))
        print(f"  p = {rate:<6} CP width {w_cp:.5f}  CS width {w_cs:.5f}  ratio {w_cs / w_cp:.2f}")


if __name__ == "__main__":
    main()
