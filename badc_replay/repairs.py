"""Frozen repairs: patches/ENGINE/NAME/ holds the minimal source diff and `intervention.py`, whose
`apply(engine_object)` makes the same change at run time for a repaired arm."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from badc_trace.registry import declared_path, registered

# An engine package declares the folder of its repairs here (badc's own engines too, pyproject.toml):
# `ENGINE = "package"` (a folder of the package's data, found without importing it) or
# `ENGINE = "package.module:ATTR"` (ATTR holds the path); the folder holds NAME/intervention.py (and the
# diff), for repairs named `ENGINE/NAME`.
ENTRY_POINT = "badc.repairs"


def repair_folders() -> dict[str, Path]:
    """Engine name -> the folder of its repairs, for every engine package installed here."""
    return {engine: declared_path(value) for engine, value in sorted(registered(ENTRY_POINT).items())}


def known_repairs() -> list[str]:
    return sorted(f"{engine}/{p.parent.name}" for engine, folder in repair_folders().items()
                  for p in folder.glob("*/intervention.py"))


def load_intervention(repair_id: str) -> ModuleType:
    """The runtime intervention of a repair named `ENGINE/NAME` (e.g. `llama_cpp/logical-prefix`)."""
    engine, _, name = repair_id.partition("/")
    folder = repair_folders().get(engine) if name and "/" not in name and ".." not in name else None
    path = folder / name / "intervention.py" if folder is not None else None
    if path is None or not path.is_file():
        raise LookupError(f"unknown repair {repair_id!r}; known: {', '.join(known_repairs()) or 'none'}")
    spec = importlib.util.spec_from_file_location(f"badc_patch_{repair_id.replace('/', '_').replace('-', '_')}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
