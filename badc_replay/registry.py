"""Which engines exist: those engine packages register under the `badc.engines` entry point
(`name = "module:ENGINE"`, an instance of `badc_replay.engine.Engine`), found the way pytest finds
plugins; badc's own engines register the same way (pyproject.toml). Nothing is imported until an
engine is asked for by name.
"""

from __future__ import annotations

from functools import cache

from badc_replay.engine import Engine, protocol_problems
from badc_trace.registry import load_object, nearest, registered

ENTRY_POINT = "badc.engines"


class UnknownEngineError(LookupError):
    pass


def engine_paths() -> dict[str, str]:
    return registered(ENTRY_POINT)


def engine_names() -> list[str]:
    return sorted(engine_paths())


@cache
def get_engine(name: str) -> Engine:
    paths = engine_paths()
    if name not in paths:
        raise UnknownEngineError(f"unknown engine {name!r} ({nearest(name, list(paths))}; an engine package "
                                 f"registers itself under the {ENTRY_POINT!r} entry point)")
    engine = load_object(paths[name])
    if not isinstance(engine, Engine):
        raise UnknownEngineError(f"engine {name!r}: {paths[name]} is not a badc_replay.engine.Engine instance")
    problems = protocol_problems(engine)
    if problems:
        raise UnknownEngineError(f"engine {name!r} ({paths[name]}) does not keep the engine protocol "
                                 f"(docs/engines/protocol.md): " + "; ".join(problems))
    if engine.name != name:
        raise UnknownEngineError(f"engine {name!r}: {paths[name]} calls itself {engine.name!r}")
    return engine
