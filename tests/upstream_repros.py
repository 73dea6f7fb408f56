"""The standalone reproducers behind the upstream reports (findings/*/upstream/repro.py), as the engine
tests load and run them: each is a script with no badc import, run in the build's interpreter."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

FINDINGS = Path(__file__).resolve().parents[1] / "findings"


def repro_path(folder: str) -> Path:
    return FINDINGS / folder / "upstream" / "repro.py"


def load_repro(folder: str) -> ModuleType:
    """The reproducer as a module, for its model builder."""
    spec = importlib.util.spec_from_file_location(f"badc_upstream_repro_{folder.replace('.', '_')}",
                                                  repro_path(folder))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_check(folder: str, cwd: Path, verdicts: int, unchecked: tuple[str, ...] = ()) -> str:
    """`python repro.py check` in this interpreter; asserts `verdicts` lines, every one "SHOWN: " (a report
    that no longer shows, or a fix that no longer removes it, fails here) but the `unchecked` cases, which
    must say "NOT CHECKED: CASE:" and make check exit 3 instead of 0. Returns stdout, for the figures a
    test also holds."""
    proc = subprocess.run([sys.executable, str(repro_path(folder)), "check"], capture_output=True, text=True,
                          timeout=600, cwd=cwd)
    lines = [x for x in proc.stdout.splitlines() if x.startswith(("SHOWN: ", "NOT SHOWN: ", "NOT CHECKED: "))]
    assert proc.returncode == (3 if unchecked else 0) and len(lines) == verdicts, \
        proc.stdout[-4000:] + proc.stderr[-2000:]
    assert sorted(x.split(":")[1].strip() for x in lines if x.startswith("NOT CHECKED: ")) == sorted(unchecked)
    assert all(x.startswith(("SHOWN: ", "NOT CHECKED: ")) for x in lines), lines
    return proc.stdout
