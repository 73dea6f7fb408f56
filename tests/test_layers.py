"""The packages' layers (pyproject.toml, [tool.importlinter]): each module imports only the layers below
it, imports inside functions included, so no cycle can be held open by a late import."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("badc_check", "badc_replay", "badc_trace", "badc_toy")
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed here (the test extra)")


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_every_layer_imports_only_the_layers_below_it():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "broken" not in proc.stdout.split("Contracts:")[-1].replace("0 broken", "")


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path):
    # The contract can fail: a leaf module reaching up to the registry inside a function (the way the old
    # cycle was held open) is named, with the line.
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "patches"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    text = tmp_path / "badc_replay" / "text.py"
    text.write_text(text.read_text() + "\n\ndef _engine(name):\n    from badc_replay.registry import get_engine\n"
                    "    return get_engine(name)\n")
    proc = lint(tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "badc_replay.text -> badc_replay.registry" in proc.stdout, proc.stdout[-3000:]
