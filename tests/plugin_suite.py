"""Run a throwaway engine test suite that uses badc's pytest plugin, the way an engine's own CI would."""

import subprocess
import sys
from pathlib import Path


def run_suite(folder: Path, files: dict[str, str]) -> subprocess.CompletedProcess:
    """Write `files` (campaign TOMLs and a test module) into `folder` and run pytest there."""
    for name, text in files.items():
        (folder / name).write_text(text)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_engine.py"],
                          cwd=folder, capture_output=True, text=True)
