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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# What a recorded argument may be made of. A trace is data: unpickling may construct these classes and
# values and call these rebuild functions, nothing else (no dotted names, no other function: pickle calls
# whatever `find_class` returns, and torch.storage._load_from_bytes alone would run a nested, unrestricted
# torch.load). Classes come from these modules exactly (dtypes, devices, containers), and from the module
# prefixes of the engine's own `Allowlist` (its probe declares it: processors, stopping criteria,
# generation configs).
CLASS_MODULES = frozenset({"torch", "numpy", "numpy.dtypes", "collections", "builtins"})
ALLOWED_BUILTINS = frozenset({"set", "frozenset", "slice", "complex", "bytearray", "range", "object"})
REBUILDERS = frozenset({("copyreg", "_reconstructor"), ("_codecs", "encode"),
                        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
                        ("badc_trace.portable", "_tensor"), ("badc_trace.portable", "Ref")})
DENIED_CLASSES = frozenset({("numpy", "memmap")})  # constructing one opens (and may truncate) a file


@dataclass(frozen=True)
class Allowlist:
    """What one engine's recorded arguments may hold beyond plain values, tensors and `Ref`s, declared by
    its probe (`BaseInstrumentor.portable_allowlist`): classes of these module prefixes, these rebuild functions
    (module, name), and `reducers()` for its native objects that do not pickle (type -> reducer)."""

    class_prefixes: tuple[str, ...] = ()
    rebuilders: frozenset[tuple[str, str]] = frozenset()
    reducers: Callable[[], dict[type, Any]] | None = None


PLAIN = Allowlist()  # plain values, tensors and references only


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
    # the from_pretrained keywords that chose the weights or the tokenizer's files (LOAD_KEYS), as given
    load: tuple[tuple[str, str], ...] = ()


LOAD_KEYS = ("gguf_file", "subfolder", "revision", "variant")


def _tensor(data: bytes, dtype: str, shape: list[int]) -> Any:
    import numpy as np
    import torch

    return torch.from_numpy(np.frombuffer(data, dtype=dtype).reshape(shape).copy())


def _reducers(allow: Allowlist) -> dict[type, Any]:
    out: dict[type, Any] = {}
    try:  # tensors as bytes, dtype and shape: torch's own reducer goes through an unrestricted torch.load
        import torch

        def tensor(t: Any) -> tuple[Any, tuple[bytes, str, list[int]]]:
            a = t.detach().cpu().numpy()
            return _tensor, (a.tobytes(), a.dtype.str, list(a.shape))

        out[torch.Tensor] = tensor
    except ImportError:
        pass
    return {**out, **(allow.reducers() if allow.reducers else {})}


def dumps(obj: Any, allow: Allowlist = PLAIN) -> bytes:
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=4)
    p.dispatch_table = {**copyreg.dispatch_table, **_reducers(allow)}
    try:
        p.dump(obj)
    except Exception as e:  # a user's own processor class, a lambda, a native handle
        raise NotPortable(f"{type(e).__name__}: {e}") from None
    return buf.getvalue()


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, allow: Allowlist):
        super().__init__(io.BytesIO(data))
        self.allow = allow

    def find_class(self, module: str, name: str) -> Any:
        prefixes = self.allow.class_prefixes
        refused = NotPortable(f"the recorded arguments hold {module}.{name}, which replay does not load (only "
                              f"classes of {', '.join(m.rstrip('.') for m in prefixes) or 'no engine module'} "
                              "and plain values: a trace is data)")
        if (module, name) in REBUILDERS or (module, name) in self.allow.rebuilders:
            return super().find_class(module, name)
        if ("." in name or name.startswith("_") or (module, name) in DENIED_CLASSES
                or (module == "builtins" and name not in ALLOWED_BUILTINS)
                or not (module in CLASS_MODULES or (prefixes and module.startswith(prefixes)))):
            raise refused
        found = super().find_class(module, name)
        if callable(found) and not isinstance(found, type):  # a function: pickle would call it
            raise refused
        return found


def loads(data: bytes, allow: Allowlist = PLAIN) -> Any:
    try:
        return _Unpickler(data, allow).load()
    except NotPortable:
        raise
    except Exception as e:
        raise NotPortable(f"the recorded arguments could not be loaded here ({type(e).__name__}: {e})") from None


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()
