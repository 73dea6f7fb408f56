"""Engine tests run inside a build's environment (tools/run_tests.py sets BADC_BUILD).

Run by hand from another environment, a file whose engine is not installed is left out; under
BADC_BUILD nothing is left out, so a broken environment fails instead of passing silently. Engines are
found through the probe registry (`test_ENGINE*.py`, the engine's distribution from its probe's
`package`), so a new engine needs no entry here.
"""

import importlib.metadata
import os
from pathlib import Path

from badc_trace.registry import probe_class, probe_paths


def _installed(engine: str) -> bool:
    try:
        importlib.metadata.version(probe_class(engine).package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def pytest_ignore_collect(collection_path: Path, config):
    if os.environ.get("BADC_BUILD"):
        return None
    for engine in probe_paths():
        if collection_path.name.startswith(f"test_{engine}") and not _installed(engine):
            return True
    return None
