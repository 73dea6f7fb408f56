"""Validation shared by configs, campaign files and results: strict pydantic dataclasses that refuse
unknown keys, and problems in words (the key path, what is wrong, the nearest valid key)."""

from __future__ import annotations

import types
import typing
from typing import Any

import pydantic
import typing_extensions

from badc_trace.registry import nearest  # noqa: F401  (re-exported: the nearest valid choice, for messages)

T = typing.TypeVar("T")


class ConfigError(ValueError):
    """A config that does not validate: which config, which key, what is wrong, the nearest valid key."""

    def __init__(self, config_id: str, problems: list[str]):
        self.config_id, self.problems = config_id, problems
        super().__init__(f"config {config_id}: " + "; ".join(problems))


@typing_extensions.dataclass_transform()
def strict(cls: type[T]) -> type[T]:
    """A pydantic dataclass that refuses unknown keys and values of the wrong type (a dataclass to type
    checkers too: its fields stay typed)."""
    made = pydantic.dataclasses.dataclass(cls, config=pydantic.ConfigDict(extra="forbid", strict=True))
    return typing.cast(type[T], made)


def _keys_of(cls: Any) -> list[str]:
    """The keys a pydantic dataclass or TypedDict takes."""
    if hasattr(cls, "__pydantic_fields__"):
        return list(cls.__pydantic_fields__)
    if typing_extensions.is_typeddict(cls):
        return list(typing.get_type_hints(cls))
    return []


def _field_type(cls: Any, key: Any) -> Any:
    """The type of `key` in `cls` (a list's item type for an index), or None."""
    origin = typing.get_origin(cls)
    if isinstance(key, int):
        args = typing.get_args(cls) if origin in (list, tuple) else ()
        return args[0] if args else None
    hints = ({k: f.annotation for k, f in cls.__pydantic_fields__.items()} if hasattr(cls, "__pydantic_fields__")
             else typing.get_type_hints(cls) if typing_extensions.is_typeddict(cls) else {})
    t = hints.get(key)
    while typing.get_origin(t) in (typing_extensions.Required, typing_extensions.NotRequired, typing.Annotated):
        t = typing.get_args(t)[0]
    args = typing.get_args(t) if typing.get_origin(t) in (typing.Union, types.UnionType) else ()
    return next((a for a in args if _keys_of(a) or typing.get_origin(a) is list), t)


def _fields_at(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """The keys valid at `loc` of a (nested) config class, for the nearest key."""
    cls = model
    for part in loc:
        cls = _field_type(cls, part)
        if cls is None:
            return []
    return _keys_of(cls)


def validation_problems(model: type, e: pydantic.ValidationError, also_valid: tuple[str, ...] = ()) -> list[str]:
    """One line per error of `e`: the key path, what is wrong, and for an unknown key the nearest valid one
    (`also_valid`: keys valid at the top level besides the model's)."""
    out = []
    for err in e.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or "(config)"
        if err["type"] == "unexpected_keyword_argument" or err["type"] == "extra_forbidden":
            valid = _fields_at(model, loc[:-1]) + (list(also_valid) if len(loc) == 1 else [])
            out.append(f"unknown key {where!r} ({nearest(str(loc[-1]), valid)})")
        elif err["type"] == "value_error" and not loc:  # a cross-key check of the config's __post_init__
            out.append(str(err["msg"]).removeprefix("Value error, "))
        elif err["type"] == "missing_argument" or err["type"] == "missing":
            out.append(f"key {where!r} is required")
        else:
            out.append(f"key {where!r}: {err['msg']} (got {err.get('input')!r})")
    return out
