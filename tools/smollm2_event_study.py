"""Issue 25, item 4: the paper's Supplement F on SmolLM2-135M-Instruct with transformers (CFG 1.5, prompt
lookup 3 / n-gram 2, at most 8 new tokens, temperature 1, top-k 0, top-p 1, no chat template).

A pilot of ordinary-decoding requests (seeds of their own) fixes the event: the first returned token is
the pilot's most frequent one. The event is written to OUT/event.json before any study request. Then
three arms of N requests each:
  - ordinary decoding with native CFG (arm `off`);
  - native prompt lookup (arm `on`);
  - prompt lookup with the frozen repair `transformers/stateful-replay` as the prefix-history control
    (arm `repaired`).
badc_check/event_study.py gives the simultaneous intervals, the gap bounds and the control bound.
Each arm's counts are written as it ends, so a rerun goes on from there.

Run under the build's interpreter:
    .venvs/transformers-5.24.0/bin/python tools/smollm2_event_study.py [--requests 1024] [--pilot 256] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from badc_check.event_study import event_study, modal_first_token
from badc_replay.arms import collect
from badc_replay.engines.transformers import ENGINE

REPAIR = "transformers/stateful-replay"
# The paper's exact Paris prompt is not given. This one repeats "is the capital" so that prompt lookup
# drafts from the prompt at the first step, as the paper's native history shows.
PROMPT = "Paris is the capital of France. The capital of France is Paris. Paris is"
CONFIG = {"id": "SM-CFG-PARIS", "model": "smollm2", "prompt": PROMPT, "max_new_tokens": 8,
          "generation": {"guidance_scale": 1.5, "temperature": 1.0, "top_k": 0, "top_p": 1.0},
          "drafter": {"method": "prompt_lookup", "num_tokens": 3, "max_ngram_size": 2}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1024, help="requests per arm (paper: 1,024)")
    ap.add_argument("--pilot", type=int, default=256, help="ordinary-decoding pilot requests that fix the event")
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--out", default="findings/smollm2/event-study")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = ENGINE.parse_config(CONFIG)

    def say(msg: str) -> None:
        print(f"[event-study] {msg}", file=sys.stderr, flush=True)

    def arm(name: str, badc_arm: str, n: int, repair: str | None = None) -> dict[str, int]:
        path = out / f"{name}.json"
        if path.exists():
            kept = json.loads(path.read_text())
            if kept["requests"] == n and kept["seed"] == args.seed:
                return kept["outcomes"]
            raise SystemExit(f"{path} holds {kept['requests']} requests at seed {kept['seed']}; use another --out")
        t = time.monotonic()

        def progress(done: int, resumed: bool = False) -> None:
            say(f"{name}: {done}/{n}")

        res = collect(ENGINE, cfg, badc_arm, n, args.seed, level="counts", repair=repair, progress=progress)
        path.write_text(json.dumps({"arm": name, "badc_arm": badc_arm, "repair": repair, "requests": n,
                                    "seed": args.seed, "proposed": res.proposed, "accepted": res.accepted,
                                    "elapsed_s": round(time.monotonic() - t, 1), "outcomes": res.outcomes}))
        say(f"{name}: done in {time.monotonic() - t:.0f} s")
        return res.outcomes

    pilot = arm("pilot", "off-pilot", args.pilot)
    event_path = out / "event.json"
    if not event_path.exists():  # frozen before any study request
        event_path.write_text(json.dumps({"rule": "the pilot's most frequent first returned token",
                                          "first_token": modal_first_token(pilot), "config": CONFIG}))
    token = json.loads(event_path.read_text())["first_token"]
    arms = {"ordinary": arm("ordinary", "off", args.requests), "native": arm("native", "on", args.requests),
            "history": arm("history", "repaired", args.requests, REPAIR)}
    r = event_study(arms, frozenset({token}))
    (out / "result.json").write_text(json.dumps(r.to_dict(), indent=1))
    lines = [f"event: first returned token {token} (the pilot's modal first token, {args.pilot} requests)", ""]
    lines += [f"{a}: {i.k}/{i.n} = {100 * i.estimate:.4f}% [{100 * i.low:.4f}, {100 * i.high:.4f}]"
              for a, i in r.intervals.items()]
    lines += [f"ordinary - native: {100 * (r.intervals['ordinary'].estimate - r.intervals['native'].estimate):.4f} "
              f"points, simultaneous bounds [{100 * r.gap[0]:.4f}, {100 * r.gap[1]:.4f}]; shown above "
              f"{100 * r.gap_threshold:g} points: {r.gap_shown}",
              f"|history - ordinary|: {100 * r.control_gap:.4f} points, upper bound {100 * r.control_ub:.4f}; "
              f"below {100 * r.control_threshold:g} points: {r.control_within}"]
    (out / "result.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
