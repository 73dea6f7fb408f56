"""Which probes exist: the instrumentors engine packages register under the `badc.probes` entry point
(`name = "module:Instrumentor"`, like pytest plugins), by engine name; badc's own engines register
theirs the same way (pyproject.toml). The same lookup serves badc_replay's engine registry
(`badc.engines`) and the builds, repairs and tiny models engine packages bring.

Light on purpose (it runs inside engine processes): nothing is imported until a probe is asked for.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ENTRY_POINT = "badc.probes"


class UnknownProbeError(LookupError):
    pass


def nearest(key: str, valid: Iterable[str]) -> str:
    """`did you mean 'x'?`, or the valid choices when none is close."""
    valid = sorted(valid)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"valid: {', '.join(valid) or 'none'}"


def registered(group: str) -> dict[str, str]:
    """Name -> `module:attribute` (or package) of the `group` entry points of every distribution installed
    here, badc's own engines included (pyproject.toml); a name two distributions register is an error."""
    found: dict[str, str] = {}
    owners: dict[str, str] = {}
    for ep in importlib.metadata.entry_points(group=group):
        owner = ep.dist.name if ep.dist is not None else "?"
        if ep.name in found and found[ep.name] != ep.value:
            raise LookupError(f"{group} {ep.name!r} is registered twice: {found[ep.name]} by {owners[ep.name]} and "
                              f"{ep.value} by {owner}; uninstall one")
        found[ep.name], owners[ep.name] = ep.value, owner
    return found


def load_object(path: str) -> Any:
    """`module:attribute`, imported."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def declared_path(value: str) -> Path:
    """The folder or file an entry point declares: `package` (a folder, found without importing it: a
    package's data, a namespace folder) or `module:ATTR` (ATTR holds the path)."""
    if ":" in value:
        return Path(load_object(value))
    spec = importlib.util.find_spec(value)
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"{value!r} is not an importable package or folder")
    return Path(list(spec.submodule_search_locations)[0])


def probe_paths() -> dict[str, str]:
    return registered(ENTRY_POINT)


def probe_class(engine: str) -> Any:
    paths = probe_paths()
    if engine not in paths:
        raise UnknownProbeError(f"no probe for engine {engine!r} ({nearest(engine, paths)}; out-of-tree engines "
                                f"register one under the {ENTRY_POINT!r} entry point)")
    return load_object(paths[engine])
