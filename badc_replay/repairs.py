"""Frozen repairs: patches/ENGINE/NAME/ holds the minimal source diff and `intervention.py`, whose
`apply(engine_object)` makes the same change at run time for a repaired arm."""

from __future__ import annotations

import importlib.util
from importlib.resources import files
from pathlib import Path
from types import ModuleType

PATCHES = Path(str(files("badc_replay") / "patches"))  # package data: there in a checkout and in a wheel


def known_repairs() -> list[str]:
    return sorted(str(p.parent.relative_to(PATCHES)) for p in PATCHES.glob("*/*/intervention.py"))


def load_intervention(repair_id: str) -> ModuleType:
    """The runtime intervention of a repair named `ENGINE/NAME` (e.g. `llama_cpp/logical-prefix`)."""
    path = PATCHES / repair_id / "intervention.py"
    if "/" not in repair_id or ".." in repair_id or not path.is_file():
        raise LookupError(f"unknown repair {repair_id!r}; known: {', '.join(known_repairs()) or 'none'}")
    spec = importlib.util.spec_from_file_location(f"badc_patch_{repair_id.replace('/', '_').replace('-', '_')}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
