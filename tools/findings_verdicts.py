"""The replay verdict of every committed findings trace (the findings/**/*.badc git tracks), as `badc replay
--json` gives it.

`--write` records them in findings/replay-verdicts.json; without it, each trace is replayed again and
compared with the record (exit 1 on a difference, naming the trace and the field). A change to replay
must leave them as they are (issue 50); tests/test_findings_verdicts.py runs this comparison. A verdict
here is what decides: the exit code, the status, the counts, each class's calls and requests, the first
violation (which request, call, kind and check) and what was left unchecked; the message's float values
are left out (they are printed to 4 digits, and the kind of call they belong to is kept).

    .venv/bin/python tools/findings_verdicts.py [--write]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "findings" / "replay-verdicts.json"
KEPT = ("status", "calls", "violations", "requests", "violating_requests", "by_class", "unchecked",
        "left_unchecked", "unattributed", "carried_over")


def traces() -> list[Path]:
    """The traces git tracks under findings/: a campaign's own traces are ignored (.gitignore) and are
    not in a fresh clone, so a working tree that has them must not record or expect their verdicts."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", "findings/*.badc"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    return sorted(ROOT / name for name in listed.split("\0") if name)


def verdict(trace: Path) -> dict[str, Any]:
    """The decisive part of `badc replay --json TRACE`, with its exit code."""
    badc = Path(sys.executable).with_name("badc")
    run = subprocess.run([str(badc), "replay", "--json", str(trace)], capture_output=True, text=True)
    try:
        out = json.loads(run.stdout)
    except json.JSONDecodeError:
        return {"exit": run.returncode, "error": run.stderr.strip().splitlines()[-1:]}
    first = out.get("first_violation")
    where = None if first is None else {k: first.get(k) for k in ("request", "call", "kind", "what")}
    return {"exit": run.returncode, **{k: out.get(k) for k in KEPT}, "first_violation": where}


def differences(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    return [f"{k}: recorded {want.get(k)!r}, replayed {got.get(k)!r}" for k in sorted(set(want) | set(got))
            if want.get(k) != got.get(k)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"record the verdicts in {RECORD.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    found = {p.relative_to(ROOT).as_posix(): p for p in traces()}
    if args.write:
        got = {}
        for name, path in found.items():
            got[name] = verdict(path)
            print(f"{name}: exit {got[name]['exit']}, {got[name].get('status')}", flush=True)
        RECORD.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        return 0
    recorded = json.loads(RECORD.read_text())
    failed = [f"{name}: no recorded verdict (tools/findings_verdicts.py --write)" for name in found
              if name not in recorded]
    failed += [f"{name}: recorded, but the trace is gone" for name in recorded if name not in found]
    for name in sorted(set(found) & set(recorded)):
        diff = differences(recorded[name], verdict(found[name]))
        failed += [f"{name}: {d}" for d in diff]
        print(f"{name}: {'the same' if not diff else 'DIFFERS'}", flush=True)
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
