#!/usr/bin/env python
"""badc's one benchmark command: every figure as a ratio measured in one run on one machine.

Per engine build that is set up (the toy engine always): the bare engine loop (the harness's draws, no
probe) against badc's collection at levels counts, calls and full (draw loop only; the trace replay
timed on its own: replay calls per second), trace bytes per draw, the exact law's time, and a campaign
worker process (`python -m badc_replay.worker`) against the same probes in the bench's own process, and,
where the engine's config has a frozen repair (transformers: guidance), the repaired arm's time per draw
against the on arm's (both level full with replay).
Then, engine-free: 1 against 2 local workers on one campaign, one channel-S decision of a 10,000-event
family at 200,000 draws per arm, and draws per arm to FAILS with `--anytime` against fixed n on the
paper's strong effects. Rates leave out start-up (engine load, model build): each is timed between the
first progress report of a loop and its end. The bare loop runs before and after the levels; the
levels are compared with the mean time per draw of the two (the machine's speed drifts). Level counts,
level calls (the default) and level full with its trace replay, whose targets sit a few hundredths
from today's figures, are measured apart: alternating blocks of bare draws and of the level's (a full
block's time includes replaying its trace; a calls block's is its draw loop), each pair of blocks making
the same draws, their ratio summed over the rounds (the spread of the rounds shows the resolution). The last line is a
one-line summary of the ratios.

    .venv/bin/python tools/bench.py            # about 15 minutes on 2 cores
    .venv/bin/python tools/bench.py --quick    # at most 5 minutes
    .venv/bin/python tools/bench.py --engines llama_cpp,toy --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

# What each engine is measured on: a processor composed with speculation (the kind of config badc
# exists for), the build, and draws per loop (quick, full). A loop's rate is taken from its first
# progress report (the engine's `progress_every` draws, or the bench's own `progress_every`) to its end,
# so draws must be several of those. A worker reports at the engine's cadence: it gets enough draws for
# as many timed ones as the bench's loops.
ENGINES: dict[str, dict[str, Any]] = {
    "toy": {"build": None, "draws": (4000, 20000),
            "config": {"processors": [{"name": "min_tokens", "min_tokens": 3}]}},
    "llama_cpp": {"build": "0.3.36", "draws": (4000, 20000),
                  "config": {"processors": [{"name": "min_tokens", "min_tokens": 3}], "sampling": {"temperature": 1.0},
                             "drafter": {"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2}}},
    "transformers": {"build": "5.24.0", "draws": (600, 3000), "progress_every": 100,  # 500 untimed draws cost 10 s
                     "config": {"generation": {"guidance_scale": 1.5}}, "repair": "transformers/stateful-replay"},
    "vllm": {"build": "0.32.0", "draws": (2000, 10000), "config": {"sampling": {"temperature": 1.0}}},
    # A real vocabulary (SmolLM2-135M-Instruct, V = 49,152), where a draw costs what a trained model's does
    # (issue 50): not enumerable (no exact law cell), no worker cell; run with --engines, not by default.
    "transformers-smollm2": {
        "engine": "transformers", "build": "5.24.0", "draws": (8, 24), "progress_every": 2, "default": False,
        "config": {"model": "smollm2", "max_new_tokens": 8,
                   "prompt": "Paris is the capital of France. The capital of France is Paris. Paris is",
                   "generation": {"guidance_scale": 1.5, "temperature": 1.0, "top_k": 0, "top_p": 1.0},
                   "drafter": {"method": "prompt_lookup", "num_tokens": 3, "max_ngram_size": 2}}},
    "llama_cpp-smollm2": {
        "engine": "llama_cpp", "build": "0.3.36", "draws": (200, 800), "progress_every": 20, "default": False,
        "config": {"model": "smollm2", "chat": True, "max_new_tokens": 8, "sampling": {"temperature": 1.0},
                   "prompt": "Repeat after me: the cat sat on the mat.",
                   "processors": [{"name": "min_tokens", "min_tokens": 3}],
                   "drafter": {"method": "prompt_lookup", "num_pred_tokens": 4, "max_ngram_size": 2}}},
}


def _rate(x: float) -> str:
    """Draws per second: whole ones, or three digits below 10 (a trained model's draw takes seconds)."""
    return f"{x:,.0f}" if x >= 10 else f"{x:.3g}"


def engine_of(name: str) -> str:
    """The registered engine a bench entry measures (an entry is named after it, or says which)."""
    return ENGINES[name].get("engine", name)

LEVELS = ("counts", "calls", "full")
AB_ROUNDS = 4  # counts, and full with replay, against the bare loop: alternating blocks, as many draws as a loop


# -- inside the build's interpreter ------------------------------------------------------------------
def _loop_rate(marks: list[tuple[float, int]]) -> float:
    """Draws per second between the first and the last progress report."""
    (t0, d0), (t1, d1) = marks[0], marks[-1]
    return (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else float("nan")


def child(engine_name: str, draws: int, cells: list[str], folder: str) -> dict[str, Any]:
    """The cells of one engine measured in this process (`bare`, a level, `law`), as JSON-able figures."""
    from badc_replay.arms import collect, process_harness
    from badc_replay.contract import replay_trace
    from badc_replay.registry import get_engine

    engine = get_engine(engine_of(engine_name))
    engine.progress_every = ENGINES[engine_name].get("progress_every", engine.progress_every)
    cfg = engine.parse_config({"id": "bench", **ENGINES[engine_name]["config"]})
    out: dict[str, Any] = {}
    harness = None

    def bare() -> float:
        step = engine.batch
        seeds = list(range(draws))
        warm = min(engine.progress_every, draws // 4)
        for lo in range(0, warm, step):
            harness.draw(seeds[lo:lo + step]) if step > 1 else harness.draw(seeds[lo])
        t = time.perf_counter()
        for lo in range(warm, draws, step):
            harness.draw(seeds[lo:lo + step]) if step > 1 else harness.draw(seeds[lo])
        return (draws - warm) / (time.perf_counter() - t)

    def alternating(rounds: int, level: str) -> None:
        """Level counts, level calls (the default) and level full with its trace replay (collect replays the
        trace it wrote), against the bare loop in alternating blocks: a probe's few percent are below the
        drift between two separate loops here, and between adjacent blocks the drift is small. Both blocks
        of a round make the same draws (the bare one draws the seeds collect derives), so a round compares
        the same work. A counts or full block is timed whole; a calls block from its first draw's end to its
        last's (the draw loop: the rate the default level costs, without the trace's start; its trace is not
        replayed, the calls cell times that), and its bare block likewise."""
        from badc_trace.seeds import draw_seed

        block = -(-draws // rounds // engine.batch) * engine.batch
        first = draws * {"counts": 1, "full": 2, "calls": 3}[level]  # seeds the other loops do not use
        every, engine.progress_every = engine.progress_every, engine.batch  # a mark after each draw
        t_bare = t_level = 0.0
        ratios = []
        for r in range(rounds):
            lo = first + r * block
            seeds = [draw_seed(1, cfg.id, "on", i) for i in range(lo, lo + block)]
            ends = [time.perf_counter()]
            for i in range(0, block, engine.batch):
                harness.draw(seeds[i:i + engine.batch]) if engine.batch > 1 else harness.draw(seeds[i])
                ends.append(time.perf_counter())
            loop = level == "calls" and block > engine.batch  # one batch a block (vLLM): timed whole
            b = ends[-1] - ends[1 if loop else 0]
            trace = None if level == "counts" else os.path.join(folder, f"{engine_name}-{level}-ab-{r}.badc")
            ends = [time.perf_counter()]
            collect(engine, cfg, "on", block, 1, start=lo, level=level, trace_path=trace, replay=level != "calls",
                    progress=lambda done, resumed=False, ends=ends: ends.append(time.perf_counter()))
            c = ends[-1] - ends[1] if loop else time.perf_counter() - ends[0]
            t_bare, t_level = t_bare + b, t_level + c
            ratios.append(b / c)
        engine.progress_every = every
        out[f"{level}_ab"], out[f"{level}_ab_rounds"] = t_bare / t_level, ratios

    for cell in cells:
        started = time.perf_counter()
        if cell == "bare":
            harness = process_harness(engine, cfg, "on")  # the levels' cells after it reuse it
            out["bare"] = bare()
        elif cell in ("counts_ab", "calls_ab", "full_ab"):
            alternating(AB_ROUNDS, cell.removesuffix("_ab"))
        elif cell == "law":
            t = time.perf_counter()
            law = engine.reference_law(cfg)
            out["law_s"], out["law_outcomes"] = time.perf_counter() - t, len(law.law)
        else:  # a level of the on arm, or the repaired arm at level full (its frozen repair applied)
            marks: list[tuple[float, int]] = []
            trace = None if cell == "counts" else os.path.join(folder, f"{engine_name}-{cell}.badc")
            arm, level, repair = ("repaired", "full", ENGINES[engine_name]["repair"]) if cell == "repaired" else \
                ("on", cell, None)
            collect(engine, cfg, arm, draws, 1, trace_path=trace, level=level, repair=repair, replay=False,
                    progress=lambda done, resumed=False, marks=marks: marks.append((time.perf_counter(), done)))
            out[cell] = _loop_rate(marks)
            if trace is not None:  # its replay, timed on its own
                t = time.perf_counter()
                res = replay_trace(trace)
                replay = time.perf_counter() - t
                out[f"{cell}_replay_calls_per_s"] = res.calls / replay if replay else float("nan")
                out[f"{cell}_bytes_per_draw"] = os.path.getsize(trace) / draws
                out[f"{cell}_with_replay"] = 1 / (1 / out[cell] + replay / draws)  # draw loop, then its replay
        print(f"[bench] {engine_name} {cell}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if harness is not None and len(cells) > 1:
        # the bare loop again after the levels: these machines' speed drifts by tens of percent within a
        # minute, so the levels are compared with the mean time per draw of a bare loop on either side
        out["bare_first"], out["bare_last"] = out["bare"], bare()
        out["bare"] = 2 / (1 / out["bare_first"] + 1 / out["bare_last"])
    return out


# -- the driver --------------------------------------------------------------------------------------
def _python_for(engine: str) -> str | None:
    build = ENGINES[engine]["build"]
    if build is None:
        return sys.executable
    from badc_check.builds import build_for

    try:
        b = build_for(engine_of(engine), build)
    except LookupError:
        return None
    return str(b.python) if b.installed else None


def _run_child(python: str, engine: str, draws: int, cells: list[str], folder: str) -> dict[str, Any]:
    cmd = [python, str(Path(__file__).resolve()), "--child", engine, "--draws", str(draws), "--cells",
           ",".join(cells), "--folder", folder]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(f"{engine} {cells}: {proc.stderr[-1500:]}")
    for line in proc.stderr.splitlines():  # each cell's time: where a slow run goes
        if line.startswith("[bench] "):
            print(line, file=sys.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _worker_rate(python: str, engine: str, draws: int, level: str, folder: str) -> float:
    """A campaign worker's draw loop, from its stderr progress lines (`progress ARM DONE/TOTAL`)."""
    cfg = Path(folder) / f"{engine}-worker.json"
    cfg.write_text(json.dumps({"id": "bench", "engine": engine_of(engine), **({"build": ENGINES[engine]["build"]}
                                                                   if ENGINES[engine]["build"] else {}),
                               **ENGINES[engine]["config"]}))
    cmd = [python, "-m", "badc_replay.worker", str(cfg), "--out", str(Path(folder) / f"{engine}-worker"), "--arm",
           "on", "--start", "0", "--count", str(draws), "--seed", "1", "--level", level, "--seal", "bench"]
    marks: list[tuple[float, int]] = []
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT) as proc:
        for line in proc.stderr:
            if line.startswith("progress "):
                done, total = map(int, line.split()[2].split("/"))
                marks.append((time.perf_counter(), done))
                if done == total:  # the draw loop is timed; its trace's replay is not (the levels' cells time it)
                    proc.terminate()
                    break
    if not marks or marks[-1][1] < draws:
        raise RuntimeError(f"{engine} worker exited {proc.returncode} after {marks[-1][1] if marks else 0} draws")
    return _loop_rate(marks)


def engine_figures(engine: str, quick: bool, folder: str) -> dict[str, Any] | None:
    python = _python_for(engine)
    if python is None:
        return None
    draws = ENGINES[engine]["draws"][0 if quick else 1]
    from badc_replay.registry import get_engine

    cells = ["bare", "counts_ab", "calls_ab", "full_ab", "calls", "full",
             *(["repaired"] if "repair" in ENGINES[engine] else [])]
    fig: dict[str, Any] = {"draws": draws}
    real = "model" in ENGINES[engine]["config"]  # a trained checkpoint: no exact law, no worker cell
    law = [] if real else ["law"]
    # the on arm's loops share one harness (one engine start; a repaired arm gets its own); vLLM's kernel
    # needs a second in-process LLM, which its CPU kernel registration may refuse once engine modules ran
    # (tests/engines/test_vllm_campaign.py)
    if get_engine(engine_of(engine)).batch > 1:
        fig.update(_run_child(python, engine, draws, cells, folder))
        fig.update(_run_child(python, engine, draws, law, folder) if law else {})
    else:
        fig.update(_run_child(python, engine, draws, [*cells, *law], folder))
    if not real:
        every = get_engine(engine_of(engine)).progress_every
        timed = draws - ENGINES[engine].get("progress_every", every)  # as many timed draws as the loops
        fig["worker_calls"] = _worker_rate(python, engine, max(draws, every + timed), "calls", folder)
    return fig


def workers_figures(quick: bool, folder: str) -> dict[str, float]:
    """1 against 2 local workers on a toy campaign of 8 shards (engine-free, runs everywhere). Its serial
    parts (worker start-up, the comparator's permutations, the report) are about 2 s, so the draws are
    sized to take most of the time, as in a real campaign."""
    from badc_check.campaign import load_campaign, run_campaign

    def campaign(name: str, n: int) -> Path:
        path = Path(folder) / f"{name}.toml"
        path.write_text(f'[campaign]\nname = "bench"\ndraws = {n}\nshard = {n // 4}\nseed = 1\n'
                        '[defaults]\nengine = "toy"\nbuild = "0.1.0"\n[[config]]\nid = "A"\n'
                        'processors = [{ name = "min_tokens", min_tokens = 3 }]\n')
        return path

    # a small run first, so that neither timed run pays the first (cold) imports of its worker processes
    run_campaign(load_campaign(campaign("warmup", 400)), Path(folder) / "warmup", workers=2, log=lambda m: None,
                 plots=False)
    path = campaign("workers", 16000 if quick else 80000)
    times = {}
    for k in (1, 2):
        t = time.perf_counter()
        run_campaign(load_campaign(path), Path(folder) / f"w{k}", workers=k, log=lambda m: None, plots=False)
        times[k] = time.perf_counter() - t
    return {"one_s": times[1], "two_s": times[2], "speedup": times[1] / times[2]}


def decision_figures() -> dict[str, float]:
    import numpy as np
    from bench_decision import big_law

    from badc_check.decide import Arm, Config, decide
    from badc_check.events import EventFamily

    law = big_law()
    rng = np.random.default_rng(1)
    keys, p = list(law), np.array(list(law.values()))
    on, off = (dict(zip(keys, rng.multinomial(200_000, p).tolist(), strict=True)) for _ in range(2))
    t = time.perf_counter()
    fam = EventFamily.build(law)
    decide(Config("bench", Arm(on, proposed=1), Arm(off), reference=law), family=fam)
    return {"decision_s": time.perf_counter() - t, "events": len(fam)}


def anytime_figures(quick: bool) -> dict[str, float]:
    import numpy as np
    from bench_anytime import EFFECTS, N, effect_law, simulate

    from badc_check.events import EventFamily
    from tests.lawgen import random_law

    rng = np.random.default_rng(20261201)
    p = random_law(21)
    runs = 10 if quick else 50
    out = {}
    for name, tv in EFFECTS.items():
        if tv < 0.1:  # the strong effects only: a weak one takes the whole n either way
            continue
        q = effect_law(p, tv)
        seq = simulate(p, q, EventFamily.build(p, {"H": q}), runs, rng, sequential=True)
        out[name] = N / float(np.median(np.where(seq > 0, seq, N)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer draws per loop: at most 5 minutes")
    ap.add_argument("--engines", default=",".join(e for e, v in ENGINES.items() if v.get("default", True)),
                    help=f"comma-separated, of {', '.join(ENGINES)} (default: those on the tiny models)")
    ap.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--draws", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--cells", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.draws, args.cells.split(","), args.folder)))
        return 0
    engines = [e for e in args.engines.split(",") if e]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        ap.error(f"unknown engine {unknown[0]!r} (known: {', '.join(ENGINES)})")
    t0 = time.monotonic()
    print(f"# badc bench: {platform.node()}, {os.cpu_count()} cores, {platform.machine()}, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}{', quick' if args.quick else ''}")
    figures: dict[str, Any] = {"engines": {}}
    summary = []
    with tempfile.TemporaryDirectory() as folder:
        print("\n| engine | draws | bare draws/s (before, after the levels) | counts (alternating with bare: all, "
              "rounds' range) | calls (alternating, as counts, draw loop) | full | "
              "full + replay (alternating, as counts) | "
              "replay calls/s | bytes/draw calls, full | exact law | worker / bench (calls) | "
              "repaired arm: time / on arm's |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for engine in engines:
            t = time.monotonic()
            fig = engine_figures(engine, args.quick, folder)
            print(f"[bench] {engine}: {time.monotonic() - t:.0f} s", file=sys.stderr)  # where a slow run goes
            if fig is None:
                print(f"| {engine} | build {ENGINES[engine]['build']} not set up | | | | | | | | | | |")
                continue
            figures["engines"][engine] = fig
            bare = fig["bare"]
            r = {lv: fig[lv] / bare for lv in LEVELS if lv in fig}
            # alternating blocks: a ratio within each round, not across loops
            r["counts"], r["calls"], r["full_replay"] = fig["counts_ab"], fig["calls_ab"], fig["full_ab"]
            spread = {lv: f" ({min(fig[f'{lv}_ab_rounds']):.2f}-{max(fig[f'{lv}_ab_rounds']):.2f})"
                      for lv in ("counts", "calls", "full")}
            worker = fig["worker_calls"] / fig["calls"] if "worker_calls" in fig else float("nan")
            law = f"{fig['law_s']:.1f} s ({fig['law_outcomes']} outcomes)" if "law_s" in fig else "-"
            # the repaired arm against the on arm, both at level full with their replay: a time ratio
            repaired = fig["full_with_replay"] / fig["repaired_with_replay"] if "repaired_with_replay" in fig else None
            rep = "-" if repaired is None else f"{repaired:.2f}"
            drift = f" ({_rate(fig['bare_first'])}, {_rate(fig['bare_last'])})" if "bare_last" in fig else ""
            print(f"| {engine} | {fig['draws']:,} | {_rate(bare)}{drift} | {r['counts']:.2f}{spread['counts']} | "
                  f"{r['calls']:.2f}{spread['calls']} | {r['full']:.2f} | {r['full_replay']:.2f}{spread['full']} | "
                  f"{fig['full_replay_calls_per_s']:,.0f} | {fig['calls_bytes_per_draw']:.0f}, "
                  f"{fig['full_bytes_per_draw']:.0f} | {law} | "
                  f"{worker:.2f} | {rep} |")
            summary.append(f"{engine} counts {r['counts']:.2f} calls {r['calls']:.2f} "
                           f"full+replay {r['full_replay']:.2f} worker {worker:.2f}"
                           + ("" if repaired is None else f" repaired {repaired:.2f}"))
        t = time.monotonic()
        w = figures["workers"] = workers_figures(args.quick, folder)
        print(f"[bench] workers: {time.monotonic() - t:.0f} s", file=sys.stderr)
        print(f"\nlocal workers (toy campaign, 8 shards): 1 worker {w['one_s']:.1f} s, 2 workers {w['two_s']:.1f} s: "
              f"{w['speedup']:.2f}x")
        d = figures["decision"] = decision_figures()
        print(f"one channel-S decision, {d['events']:,} events, 200,000 draws per arm: {d['decision_s']:.2f} s")
        t = time.monotonic()
        a = figures["anytime"] = anytime_figures(args.quick)
        print(f"[bench] anytime: {time.monotonic() - t:.0f} s", file=sys.stderr)
        print("draws to FAILS, fixed n / --anytime (median over simulated configs): "
              + ", ".join(f"{k} {v:.0f}x" for k, v in a.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    print(f"\nbench ({time.monotonic() - t0:.0f} s): " + "; ".join(summary)
          + f"; 2 workers {w['speedup']:.2f}x; decision {d['decision_s']:.2f} s; anytime "
          + ", ".join(f"{v:.0f}x" for v in a.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
