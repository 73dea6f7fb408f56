"""Engine tests run inside a build's environment (tools/run_tests.py sets BADC_BUILD).

Run by hand from another environment, a file whose engine is not importable is left out; under
BADC_BUILD nothing is left out, so a broken environment fails instead of passing silently.
"""

import importlib.util
import os
from pathlib import Path

MODULES = {"transformers": "transformers", "llama_cpp": "llama_cpp", "vllm": "vllm"}


def pytest_ignore_collect(collection_path: Path, config):
    if os.environ.get("BADC_BUILD"):
        return None
    for engine, module in MODULES.items():
        if collection_path.name.startswith(f"test_{engine}") and importlib.util.find_spec(module) is None:
            return True
    return None
