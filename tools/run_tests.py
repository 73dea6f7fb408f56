#!/usr/bin/env python
"""Run every test: lint, the core suite in .venv, and each installed build's engine tests in its own
environment (engines are only importable there). Prints one closing line with the totals.

The suites run two at a time (`--jobs`, default: the number of cores, at most 2): most tests drive one
single-threaded engine, so a second suite uses the core the first leaves idle. Each suite's output is
printed whole when it ends, with its time, and pytest's slowest tests (`--durations`).

    .venv/bin/python tools/run_tests.py [-k EXPR] [--core-only] [--builds NAME,...] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from badc_check.builds import installed_builds  # noqa: E402

_print = threading.Lock()
# The order the suites start in, so that two lanes finish close together (measured 2026-12-02 from a
# fresh clone, two at a time on 2 cores: vllm 15 min and growing, transformers 7-8 min per build, core 9,
# llama_cpp 4.5): vllm first on one lane, then llama_cpp; both transformers builds, then core, on the other.
ORDER = ("vllm", "transformers", "core", "llama_cpp")


def _pytest(python: Path, args: list[str], env: dict[str, str], label: str) -> tuple[int, dict[str, int]]:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        log = Path(tmp) / "out.log"
        with _print:
            print(f"=== {label}: started", flush=True)
        start = time.monotonic()
        with open(log, "w") as out:
            rc = subprocess.call([str(python), "-m", "pytest", "-q", "--durations=8", f"--junitxml={junit}", *args],
                                 cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if junit.exists():
            for suite in ET.parse(junit).getroot().iter("testsuite"):
                for k in totals:
                    totals[k] += int(suite.get(k, 0))
        with _print:
            print(f"\n=== {label}\n{log.read_text()}=== {label}: exit {rc} in {time.monotonic() - start:.0f} s",
                  flush=True)
        return rc, totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default=None, help="pytest -k expression")
    ap.add_argument("--core-only", action="store_true", help="skip the engine environments")
    ap.add_argument("--builds", default="", help="only these installed builds (comma-separated)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="suites run at once")
    args = ap.parse_args()
    extra = ["-k", args.k] if args.k else []
    failed_steps = []
    print("=== ruff", flush=True)
    if subprocess.call([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT) != 0:
        failed_steps.append("ruff")
    print("=== import layers (pyproject.toml, [tool.importlinter])", flush=True)
    if subprocess.call([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=ROOT) != 0:
        failed_steps.append("import layers")
    print("=== mypy (pyproject.toml, [tool.mypy] files)", flush=True)
    if subprocess.call([sys.executable, "-m", "mypy"], cwd=ROOT) != 0:
        failed_steps.append("mypy")
    env = dict(os.environ)
    env.pop("BADC_BUILD", None)
    suites = [("core", (Path(sys.executable), ["tests", "--ignore=tests/engines", *extra], env, "core (.venv)"))]
    if not args.core_only:
        builds = [b for b in installed_builds() if not b.main]  # engines shipped with badc: in the core suite
        if args.builds:
            builds = [b for b in builds if b.name in args.builds.split(",")]
        if not builds:
            print("no engine build is installed: run `python3.11 tools/setup_envs.py`", file=sys.stderr)
            failed_steps.append("engines")
        for b in builds:
            files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "engines").glob(f"test_{b.engine}*.py"))
            suites.append((b.engine, (b.python, [*files, *extra], {**env, "BADC_BUILD": b.name}, f"engine {b.name}")))
    suites.sort(key=lambda s: ORDER.index(s[0]) if s[0] in ORDER else len(ORDER))
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(lambda s: _pytest(*s[1]), suites))
    print(f"\n=== all suites: {time.monotonic() - start:.0f} s with {max(1, args.jobs)} at a time", flush=True)
    passed = sum(t["tests"] - t["failures"] - t["errors"] - t["skipped"] for _, t in runs)
    failed = sum(t["failures"] + t["errors"] for _, t in runs)
    skipped = sum(t["skipped"] for _, t in runs)
    failed_steps += [f"pytest run {i}" for i, (rc, _) in enumerate(runs) if rc != 0]
    print(f"\nbadc: {passed} passed, {failed} failed, {skipped} skipped")
    if failed_steps:
        print(f"failed steps: {', '.join(failed_steps)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
