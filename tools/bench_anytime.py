#!/usr/bin/env python
"""Benchmark of `badc run --anytime` (badc_check/looks.py: the error budget spent over planned looks),
by simulation on known laws, with channel S exactly as campaigns compute it:

1. the width of the last look's bound (Clopper-Pearson at half the tail) against fixed-n
   Clopper-Pearson at the planned n, and the beta-binomial mixture sequence's for comparison;
2. draws per arm to FAILS against fixed n = 200,000 at the same alpha, on effects the size of the
   paper's MinTokens (LCP-2, TV 0.156), parity (LCP-1, TV 0.117) and SynthID (HF17-7, TV 0.647) rows,
   and a weak one the size of guidance (HF17-6, TV 0.022);
3. the false-FAILS rate over simulated campaigns whose arms have equal laws, at every look, with its
   Clopper-Pearson interval (target: at most alpha).

Each simulated config has an 85-outcome law P (tests/lawgen.py), the family of P and one hypothesis
event A_H (as registered probes have), m = 26 and alpha = 0.05 as in the paper's Table 2.

    .venv/bin/python tools/bench_anytime.py [--campaigns 2000] [--effect-runs 200] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from badc_check.bounds import cp_lower, cp_upper, cs_lower, cs_upper  # noqa: E402
from badc_check.events import EventFamily  # noqa: E402
from badc_check.looks import planned_looks  # noqa: E402
from tests.lawgen import random_law  # noqa: E402

ALPHA, M, THRESHOLD, N = 0.05, 26, 0.01, 200_000
EFFECTS = {"SynthID (HF17-7)": 0.647, "MinTokens (LCP-2)": 0.156, "parity (LCP-1)": 0.117,
           "guidance (HF17-6)": 0.022}


def effect_law(p: dict[str, float], tv: float, seed: int = 3) -> dict[str, float]:
    """A law at TV exactly `tv` from p: p mixed with p conditioned on a random set G of outcomes holding
    about a third of p's mass. The hypothesis event A_H = G then carries the whole distance with
    P(A_H) ~ 1/3, a wide (not a best-case) event for the bounds."""
    rng = np.random.default_rng(seed)
    keys = list(p)
    g, mass = [], 0.0
    for i in rng.permutation(len(keys)):
        if mass >= 1 / 3:
            break
        g.append(keys[i])
        mass += p[keys[i]]
    t = tv / (1 - mass)
    assert 0 < t <= 1, "effect too large for this law"
    return {k: (1 - t) * v + (t * v / mass if k in g else 0.0) for k, v in p.items()}


def _counts(fam: EventFamily, law: dict[str, float], keys: list[str], n: np.ndarray | int, runs: int,
            rng: np.random.Generator) -> np.ndarray:
    p = np.array([law.get(k, 0.0) for k in keys])
    x = rng.multinomial(n, p / p.sum(), size=runs)
    return x @ fam.membership(keys)


def _gaps(fam: EventFamily, on: np.ndarray, off: np.ndarray, n: int, tail: float) -> np.ndarray:
    """max over the family of L_on - U_off per campaign (complements from n - base)."""
    full_on, full_off = np.hstack([on, n - on]), np.hstack([off, n - off])
    return (cp_lower(full_on, n, tail) - cp_upper(full_off, n, tail)).max(axis=1)


def simulate(p: dict[str, float], q: dict[str, float], fam: EventFamily, runs: int, rng: np.random.Generator,
             sequential: bool, m: int = M, threshold: float = THRESHOLD) -> np.ndarray:
    """Draws per arm at which each simulated config first has D > threshold, or 0 if never."""
    keys = sorted(set(p) | set(q))
    tail = ALPHA / (m * fam.bounds_per_config)
    looks = planned_looks(N) if sequential else [None]
    on = np.zeros((runs, len(fam.base)), dtype=np.int64)
    off = np.zeros_like(on)
    stopped = np.zeros(runs, dtype=np.int64)
    done = 0
    for look in looks:
        n = N if look is None else look.draws
        on += _counts(fam, q, keys, n - done, runs, rng)
        off += _counts(fam, p, keys, n - done, runs, rng)
        done = n
        fails = _gaps(fam, on, off, n, tail * (1.0 if look is None else look.spend)) > threshold
        stopped[(stopped == 0) & fails] = n
    return stopped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=2000, help="equal-law campaigns for the false-FAILS rate")
    ap.add_argument("--effect-runs", type=int, default=200, help="simulated configs per effect size")
    ap.add_argument("--quick", action="store_true", help="500 campaigns, 50 runs per effect")
    args = ap.parse_args()
    if args.quick:
        args.campaigns, args.effect_runs = 500, 50
    t0 = time.monotonic()
    rng = np.random.default_rng(20261201)
    p = random_law(21)
    looks = planned_looks(N)
    print(f"# bench_anytime: {platform.node()} {platform.machine()}, {time.strftime('%Y-%m-%d')}; alpha {ALPHA}, "
          f"m {M}, threshold {THRESHOLD}, n {N:,} per arm; looks at "
          + ", ".join(f"{lk.draws:,}" for lk in looks) + " (last look 1/2 of the budget, "
          f"the others {looks[0].spend:.4f} each)")
    fam0 = EventFamily.build(p, {"H": effect_law(p, 0.1)})
    tail = ALPHA / (M * fam0.bounds_per_config)
    print(f"\n## 1. width at n = {N:,}, per-bound tail {tail:.3g} (B = {fam0.bounds_per_config})")
    print("| p | Clopper-Pearson | last look (tail / 2) | ratio | mixture sequence | ratio |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for pr in (0.001, 0.01, 0.1, 0.5):
        k = round(pr * N)
        w_cp = float(cp_upper(k, N, tail) - cp_lower(k, N, tail))
        w_lk = float(cp_upper(k, N, tail / 2) - cp_lower(k, N, tail / 2))
        w_cs = float(cs_upper(k, N, tail) - cs_lower(k, N, tail))
        ratios.append(w_lk / w_cp)
        print(f"| {pr} | {w_cp:.5f} | {w_lk:.5f} | {w_lk / w_cp:.3f} | {w_cs:.5f} | {w_cs / w_cp:.3f} |")
    print("\n## 2. draws per arm to FAILS (median over runs; runs that never failed are counted at n)")
    print("| effect | TV | runs | fixed n: FAILS | anytime: FAILS | anytime median draws | fewer draws |")
    print("|---|---|---|---|---|---|---|")
    speedups = {}
    for name, tv in EFFECTS.items():
        q = effect_law(p, tv)
        fam = EventFamily.build(p, {"H": q})
        fixed = simulate(p, q, fam, args.effect_runs, rng, sequential=False)
        seq = simulate(p, q, fam, args.effect_runs, rng, sequential=True)
        med = float(np.median(np.where(seq > 0, seq, N)))
        speedups[name] = N / med
        print(f"| {name} | {tv} | {args.effect_runs} | {int((fixed > 0).sum())} | {int((seq > 0).sum())} | "
              f"{med:,.0f} | {N / med:.1f}x |")
    print(f"\n## 3. false FAILS under equal laws, {args.campaigns:,} simulated campaigns (any look)")
    fam = EventFamily.build(p, {"H": effect_law(p, 0.1)})
    false = simulate(p, p, fam, args.campaigns, rng, sequential=True)
    k = int((false > 0).sum())
    lo, hi = float(cp_lower(k, args.campaigns, 0.025)), float(cp_upper(k, args.campaigns, 0.025))
    print(f"false FAILS in {k} of {args.campaigns:,} campaigns: rate {k / args.campaigns:.4f}, 95% Clopper-Pearson "
          f"[{lo:.4f}, {hi:.4f}] (target: at most alpha {ALPHA} for a family of m = {M}, so at most "
          f"{ALPHA / M:.4f} per config)")
    # The sharp statement: with m = 1, no event of any look may have L_on > U_off (threshold 0) in more
    # than alpha of the campaigns; it is what makes every FAILS at any look hold at level alpha.
    sharp = simulate(p, p, fam, args.campaigns, rng, sequential=True, m=1, threshold=0.0)
    ks = int((sharp > 0).sum())
    slo, shi = float(cp_lower(ks, args.campaigns, 0.025)), float(cp_upper(ks, args.campaigns, 0.025))
    print(f"m = 1, threshold 0 (any L_on - U_off > 0 at any look): {ks} of {args.campaigns:,}, rate "
          f"{ks / args.campaigns:.4f} [{slo:.4f}, {shi:.4f}] (target: at most alpha {ALPHA})")
    strong = min(v for n, v in speedups.items() if EFFECTS[n] > 0.1)
    print(f"\nbench_anytime: width ratio at n {max(ratios):.3f} (worst), strong effects FAILS with "
          f"{strong:.0f}x fewer draws (least), false FAILS {k / args.campaigns:.4f} <= {hi:.4f} (m = {M}), "
          f"any gap at m = 1 {ks / args.campaigns:.4f} <= {shi:.4f} (alpha {ALPHA}); {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
