"""Which probes exist: the built-in instrumentors and those other packages register under the
`badc.probes` entry point (`name = "module:Instrumentor"`, like pytest plugins), by engine name. The
same lookup serves badc_replay's engine registry (`badc.engines`).

Light on purpose (it runs inside engine processes): nothing is imported until a probe is asked for.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
from collections.abc import Iterable
from typing import Any

ENTRY_POINT = "badc.probes"
BUILTIN = {"transformers": "badc_trace.engines.transformers:TransformersInstrumentor",
           "llama_cpp": "badc_trace.engines.llama_cpp:LlamaCppInstrumentor",
           "vllm": "badc_trace.engines.vllm:VllmInstrumentor",
           "toy": "badc_trace.engines.toy:ToyInstrumentor"}


class UnknownProbeError(LookupError):
    pass


def nearest(key: str, valid: Iterable[str]) -> str:
    """`did you mean 'x'?`, or the valid choices when none is close."""
    valid = sorted(valid)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"valid: {', '.join(valid) or 'none'}"


def registered(group: str, builtin: dict[str, str]) -> dict[str, str]:
    """Name -> `module:attribute` of the built-ins and of the `group` entry points; an entry point never
    replaces a built-in of the same name."""
    return {**{ep.name: ep.value for ep in importlib.metadata.entry_points(group=group)}, **builtin}


def load_object(path: str) -> Any:
    """`module:attribute`, imported."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def probe_paths() -> dict[str, str]:
    return registered(ENTRY_POINT, BUILTIN)


def probe_class(engine: str) -> Any:
    paths = probe_paths()
    if engine not in paths:
        raise UnknownProbeError(f"no probe for engine {engine!r} ({nearest(engine, paths)}; out-of-tree engines "
                                f"register one under the {ENTRY_POINT!r} entry point)")
    return load_object(paths[engine])
