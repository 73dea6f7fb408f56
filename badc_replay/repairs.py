"""Frozen repairs: patches/ENGINE/NAME/ holds the minimal source diff and `intervention.py`, whose
`apply(engine_object)` makes the same change at run time for a repaired arm."""

from __future__ import annotations

import importlib.util
from importlib.resources import files
from pathlib import Path
from types import ModuleType

from badc_trace.registry import load_object, registered

PATCHES = Path(str(files("badc_replay") / "patches"))  # package data: there in a checkout and in a wheel
# An engine package declares the folder of its repairs here: `ENGINE = "package.module:ATTR"`, ATTR being
# a path holding NAME/intervention.py (and the diff), for repairs named `ENGINE/NAME`.
ENTRY_POINT = "badc.repairs"


def repair_folders() -> dict[str, Path]:
    """Engine name -> the folder of its repairs: badc's own engines', then the installed packages'."""
    folders = {p.name: p for p in sorted(PATCHES.iterdir()) if p.is_dir()}
    for engine, path in registered(ENTRY_POINT, {}).items():
        folders.setdefault(engine, Path(load_object(path)))
    return folders


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
