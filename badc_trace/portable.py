"""A request's call arguments as bytes that replay can load in another process, and back.

Probes of engines whose processors and stop rules are built from the caller's arguments (transformers'
`generate()`) record those arguments so that `badc replay` can rebuild them for a program it never saw.
`dumps` pickles them, with references in place of models and tokenizers (`Ref`: what to load them from)
and reducers for native objects that do not pickle. `loads` unpickles through an allowlist of modules:
a trace is data, and loading one must not import or run code from anywhere else.
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import pickle
from dataclasses import dataclass
from typing import Any

# Modules whose classes a recorded argument may be made of (prefix match on the module name).
ALLOWED_MODULES = ("transformers.", "xgrammar.", "torch", "numpy", "collections", "badc_trace.portable")
ALLOWED_BUILTINS = frozenset({"set", "frozenset", "slice", "complex", "bytearray", "range", "object"})


class NotPortable(Exception):
    """An argument that cannot be recorded, or a recorded one that will not be loaded, and why."""


@dataclass(frozen=True)
class Ref:
    """What a model or tokenizer is loaded from: a folder (absolute) or a registry name, with the
    settings the program had changed on the object itself (a model's generation config, its dtype)."""

    kind: str  # "model" | "tokenizer"
    path: str
    dtype: str | None = None
    generation_config: Any = None


def _compiled_grammar(grammar_json: str, tokenizer_json: str) -> Any:
    import xgrammar as xgr

    return xgr.CompiledGrammar.deserialize_json(grammar_json, xgr.TokenizerInfo.deserialize_json(tokenizer_json))


def _reducers() -> dict[type, Any]:
    out: dict[type, Any] = {}
    try:  # xgrammar's compiled grammars are native objects with their own JSON form
        import xgrammar as xgr

        def grammar(g: Any) -> tuple[Any, tuple[str, str]]:
            return _compiled_grammar, (g.serialize_json(), g.tokenizer_info.serialize_json())

        out[xgr.CompiledGrammar] = grammar
    except ImportError:
        pass
    return out


def dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=4)
    p.dispatch_table = {**copyreg.dispatch_table, **_reducers()}
    try:
        p.dump(obj)
    except Exception as e:  # a user's own processor class, a lambda, a native handle
        raise NotPortable(f"{type(e).__name__}: {e}") from None
    return buf.getvalue()


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in ALLOWED_BUILTINS:
            return super().find_class(module, name)
        if module.startswith(ALLOWED_MODULES) or module in ("copyreg", "_codecs"):
            return super().find_class(module, name)
        raise NotPortable(f"the recorded arguments hold {module}.{name}, which replay does not load (only classes "
                          f"of {', '.join(m.rstrip('.') for m in ALLOWED_MODULES[:-1])})")


def loads(data: bytes) -> Any:
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except NotPortable:
        raise
    except Exception as e:
        raise NotPortable(f"the recorded arguments could not be loaded here ({type(e).__name__}: {e})") from None


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()
