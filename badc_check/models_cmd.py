"""`badc models`: each installed build's tiny model and its exact first-step law, from the engine."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from badc_check.builds import Build, installed_builds, load_builds


def _law(build: Build, seed: int | None, prompt: str | None) -> dict:
    cmd = [str(build.python), "-m", "badc_trace.tiny", build.engine]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if prompt is not None:
        cmd += ["--prompt", prompt]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = "\n    ".join(proc.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"{build.name}: worker failed (exit {proc.returncode}):\n    {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(engines: list[str] | None, seed: int | None, prompt: str | None, as_json: bool) -> int:
    builds = [b for b in installed_builds() if not engines or b.engine in engines]
    if not builds:
        known = ", ".join(load_builds())
        print(f"badc models: no engine build is installed (declared: {known}); "
              "run `python3.11 tools/setup_envs.py`", file=sys.stderr)
        return 1
    print(f"badc models: {len(builds)} build(s): {', '.join(b.name for b in builds)}", file=sys.stderr)
    start = time.monotonic()
    results, failed = [], 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {b.name: pool.submit(_law, b, seed, prompt) for b in builds}
        for name, fut in futures.items():
            try:
                res = fut.result()
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"badc models: {e}", file=sys.stderr)
                failed += 1
                continue
            res["build"] = name
            results.append(res)
            print(f"badc models: {name} done ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    if as_json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            law = r["law"]
            print(f"\n{r['build']}  tiny:{r['seed']}  prompt {r['prompt']!r}  "
                  f"first-step law (min {min(law.values()):.4f}, max {max(law.values()):.4f})")
            for tok, p in law.items():
                print(f"  {tok:>6}  {p:.6f}  {'#' * round(p * 60)}")
    return 1 if failed else 0
