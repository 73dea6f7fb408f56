"""Print a tiny model's exact first-step law as JSON (run under the engine build's interpreter).

    python -m badc_trace.tiny ENGINE [--seed N] [--prompt TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from badc_trace.tiny import DEFAULT_PROMPT, engines, tiny_module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m badc_trace.tiny", description=__doc__.splitlines()[0])
    ap.add_argument("engine", choices=engines())
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    args = ap.parse_args(argv)
    module = tiny_module(args.engine)
    seed = module.DEFAULT_SEED if args.seed is None else args.seed
    # Engines log to stdout; keep it for the JSON line only.
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        dist = module.first_step_distribution(seed, args.prompt)
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
    print(json.dumps({"engine": args.engine, "seed": seed, "prompt": args.prompt, "law": dist}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
