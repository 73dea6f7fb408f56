"""Call arguments by parameter name, as `inspect.Signature.bind` gives them, at a fraction of its cost.

A probe that wraps an engine's entry point needs the caller's arguments by name (the prompt, the
processors it must wrap) on every request; `Signature.bind` costs about as much as one token of a tiny
model. A valid call of a function with only positional-or-keyword and keyword-only parameters is
bound here by zipping names; anything else (too many arguments, a name twice, a missing or unknown
one, *args or **kwargs in the signature) goes through `Signature.bind`, which raises the usual
TypeError.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_PLAIN = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class Binder:
    def __init__(self, fn: Callable[..., Any]):
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        self.plain = all(p.kind in _PLAIN for p in params)
        self.positional = tuple(p.name for p in params if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.names = tuple(self.signature.parameters)
        self.nameset = frozenset(self.names)
        self.required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The passed arguments by name, in the signature's order (defaults not filled in), as
        `dict(signature.bind(*args, **kwargs).arguments)`."""
        if self.plain and len(args) <= len(self.positional):
            passed = dict(zip(self.positional, args, strict=False))
            if not passed.keys() & kwargs.keys() and kwargs.keys() <= self.nameset:
                passed.update(kwargs)
                if self.required <= passed.keys():
                    return {k: passed[k] for k in self.names if k in passed}
        return dict(self.signature.bind(*args, **kwargs).arguments)
