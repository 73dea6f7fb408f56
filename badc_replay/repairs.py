"""Frozen repairs: patches/ENGINE/NAME/ holds the minimal source diff and `intervention.py`, whose
`apply(engine_object)` makes the same change at run time for a repaired arm."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

PATCHES = Path(__file__).resolve().parents[1] / "patches"


def load_intervention(repair_id: str) -> ModuleType:
    """The runtime intervention of a repair named `ENGINE/NAME` (e.g. `llama_cpp/logical-prefix`)."""
    path = PATCHES / repair_id / "intervention.py"
    if "/" not in repair_id or ".." in repair_id or not path.is_file():
        known = sorted(str(p.parent.relative_to(PATCHES)) for p in PATCHES.glob("*/*/intervention.py"))
        raise LookupError(f"unknown repair {repair_id!r}; known: {', '.join(known) or 'none'}")
    spec = importlib.util.spec_from_file_location(f"badc_patch_{repair_id.replace('/', '_').replace('-', '_')}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
