"""Issue 25, item 3: the paper's Supplement E and G on SmolLM2-135M-Instruct with transformers, through
`badc replay --scores` (badc_replay/scores.py): at every processor-list call, the history a stateful
processor was fed against the intended one (the prompt's last token, then the logical prefix), and the
score TVs against fresh processors along the logical prefix and along the request's own calls.

A fixed matrix of 8 prompts (P01-P04 lookup-oriented: the prompt repeats itself, so prompt lookup can
draft from it; P05-P08 ordinary requests), 2 requests per prompt (repeated initial states, not
independent draws), prompt lookup 3 / n-gram 2, at most 8 new tokens, temperature 1, top-k 0, and four
arms traced at level full:
  - `cfg`: native classifier-free guidance (scale 1.5);
  - `cfg-history`: the same with the frozen repair `transformers/stateful-replay`, the functional
    prefix-history control;
  - `plain`: no processor of its own; transformers calls no empty processor list, so its target
    scores are checked on the returned logits (`output_logits`) against the model at each prefix;
  - `repetition`: repetition penalty 1.3 (a stateless control).
A request is exposed when the drafter proposed a token; an unexposed one tests nothing.
Results per arm and prompt go to OUT/result.json and OUT/result.md; traces to OUT/traces (not kept in
git: about 1 MB per call). Each arm/prompt's result is written as it ends, so a rerun goes on from there.

Run under the build's interpreter:
    .venvs/transformers-5.24.0/bin/python tools/smollm2_score_study.py [--per-prompt 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from badc_replay.arms import collect
from badc_replay.engines.transformers import ENGINE
from badc_replay.score_study import score_study
from badc_replay.scores import AGREE_TV, WITNESS_TV

PROMPTS = {
    "P01": "Paris is the capital of France. The capital of France is Paris. Paris is",
    "P02": "one two three four five, one two three four five, one two three",
    "P03": "The cat sat on the mat. The cat sat on the mat. The cat sat",
    "P04": "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return",
    "P05": "Write a haiku about the sea.",
    "P06": "What is 2 + 2?",
    "P07": "Tell me a fun fact about octopuses.",
    "P08": "Translate 'good morning' into French.",
}
SAMPLING = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
ARMS = {  # name: (generation keywords, repair)
    "cfg": ({"guidance_scale": 1.5}, None),
    "cfg-history": ({"guidance_scale": 1.5}, "transformers/stateful-replay"),
    "plain": ({"output_logits": True, "return_dict_in_generate": True}, None),  # checked on its returned logits
    "repetition": ({"repetition_penalty": 1.3}, None),
}


def config(arm: str, pid: str) -> dict:
    generation, _ = ARMS[arm]
    return {"id": f"SM-{arm.upper()}-{pid}", "model": "smollm2", "prompt": PROMPTS[pid], "max_new_tokens": 8,
            "generation": {**generation, **SAMPLING},
            "drafter": {"method": "prompt_lookup", "num_tokens": 3, "max_ngram_size": 2}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-prompt", type=int, default=2, help="requests per prompt and arm (paper: 2)")
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--out", default="findings/smollm2/score-study")
    ap.add_argument("--restudy", action="store_true",
                    help="recompute the study of cells an older badc studied, from their kept traces (no new draws)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    cells_path = out / "cells.json"
    cells = json.loads(cells_path.read_text()) if cells_path.exists() else {}
    for arm, (_, repair) in ARMS.items():
        for pid in PROMPTS:
            key = f"{arm}/{pid}"
            trace = str(out / "traces" / f"{arm}-{pid}.badc")
            if key in cells:
                if (cells[key]["requests"], cells[key]["seed"]) != (args.per_prompt, args.seed):
                    raise SystemExit(f"{cells_path}: {key} was run with other settings; use another --out")
                stale = "checked_calls" not in cells[key]["study"]["requests"][0]  # studied by an older badc
                if not (args.restudy and stale and Path(trace).exists()):
                    continue
            t = time.monotonic()
            if key not in cells:
                cfg = ENGINE.parse_config(config(arm, pid))
                collect(ENGINE, cfg, "repaired" if repair else "on", args.per_prompt, args.seed, trace_path=trace,
                               level="full", repair=repair)
            study = score_study([trace])
            cells[key] = {"arm": arm, "prompt": pid, "repair": repair, "requests": args.per_prompt,
                          "seed": args.seed, "exposed": study.exposed, "witnesses": study.witnesses,
                          "agreeing": study.agreeing, "explained": study.explained,
                          "max_tv_intended": max(r.max_tv_intended for r in study.requests),
                          "max_tv_actual": max(r.max_tv_actual for r in study.requests),
                          "max_tv_target": max(r.max_tv_target for r in study.requests),
                          "study": study.to_dict(), "elapsed_s": round(time.monotonic() - t, 1)}
            cells_path.write_text(json.dumps(cells, indent=1))
            print(f"[score-study] {key}: {study.summary()} ({time.monotonic() - t:.0f} s)", file=sys.stderr,
                  flush=True)
    lines = [f"SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32), transformers {ENGINE.version()}, prompt "
             f"lookup 3/2, 8 new tokens, {args.per_prompt} requests per prompt and arm. Witness: a verification "
             f"call with a history mismatch and score TV > {WITNESS_TV:g} in an exposed request; agreement: every "
             f"verification call within {AGREE_TV:g} of the fresh-processor and model references.", "",
             "| arm | prompt | exposed | witnesses | agreeing | max TV intended | max TV actual history | "
             "max TV target |", "|---|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        for pid in PROMPTS:
            c = cells[f"{arm}/{pid}"]
            lines.append(f"| {arm} | {pid} | {c['exposed']}/{c['requests']} | {c['witnesses']} | {c['agreeing']} | "
                         f"{c['max_tv_intended']:.3g} | {c['max_tv_actual']:.3g} | {c['max_tv_target']:.3g} |")
    lines += [""] + [f"- {arm}: witnesses at {sum(cells[f'{arm}/{p}']['witnesses'] > 0 for p in PROMPTS)}/8 "
                     f"initial states ({sum(cells[f'{arm}/{p}']['witnesses'] for p in PROMPTS)}/"
                     f"{8 * args.per_prompt} requests); agreeing "
                     f"{sum(cells[f'{arm}/{p}']['agreeing'] for p in PROMPTS)}; unexposed prompts: "
                     + (", ".join(p for p in PROMPTS if cells[f"{arm}/{p}"]["exposed"] == 0) or "none")
                     for arm in ARMS]
    (out / "result.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
