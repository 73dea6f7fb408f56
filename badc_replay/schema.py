"""Typed record schemas: every record of a trace is checked against its engine's schema for its type
before any contract check reads it (a trace is data, often someone else's).

A schema names, per record type, the fields a check reads and their types; a missing field, a value
of the wrong type, a NaN or infinity where a number is compared, is a `TraceFormatError` naming the
byte offset of the record's chunk, the record and the field. Fields a schema does not name are left
alone (minor versions may add them). A record type the engine does not define is an error in a file of
a minor version this reader knows (a trace relabelled with another engine's name fails here); in a
newer file it is skipped and counted, so replay can say it was not checked.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from badc_trace.format import FORMAT_VERSION, TraceFormatError, TraceReader
from badc_trace.records import SHARED_TYPES, Counter

_INT = frozenset({int})  # type(True) is bool: never an int here


class Spec:
    """A field's type: `problem(value)` is None when the value fits, else what is wrong, in words."""

    name = "value"

    def problem(self, v: Any) -> str | None:
        return None  # any value (a field a check never compares, e.g. a processor's own state)


@dataclass(frozen=True)
class Type(Spec):
    types: tuple[type, ...]
    name: str

    def problem(self, v: Any) -> str | None:
        return None if type(v) in self.types else f"must be {self.name}, not {_shown(v)}"


@dataclass(frozen=True)
class _Float(Spec):
    """A float or integer; NaN never, infinity only where a masked score may be -inf."""

    neg_inf: bool = False

    @property
    def name(self) -> str:  # type: ignore[override]
        return "a number (finite or -inf)" if self.neg_inf else "a finite number"

    def problem(self, v: Any) -> str | None:
        if type(v) is int or (type(v) is float and (math.isfinite(v) or (self.neg_inf and v == -math.inf))):
            return None
        return f"must be {self.name}, not {_shown(v)}"


class _Ids(Spec):
    name = "a list of token ids"

    def problem(self, v: Any) -> str | None:
        if type(v) is list and _INT.issuperset(map(type, v)):  # in C: a record's ids are most of it
            return None if all(t >= 0 for t in v) else "holds a negative token id"
        return f"must be {self.name}, not {_shown(v)}"


@dataclass(frozen=True)
class ListOf(Spec):
    item: Spec

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"a list of {self.item.name}s"

    def problem(self, v: Any) -> str | None:
        if type(v) is not list:
            return f"must be {self.name}, not {_shown(v)}"
        for i, x in enumerate(v):
            p = self.item.problem(x)
            if p is not None:
                return f"item {i} {p}"
        return None


@dataclass(frozen=True)
class OneOf(Spec):
    options: tuple[Spec, ...]

    @property
    def name(self) -> str:  # type: ignore[override]
        return " or ".join(o.name for o in self.options)

    def problem(self, v: Any) -> str | None:
        if any(o.problem(v) is None for o in self.options):
            return None
        return f"must be {self.name}, not {_shown(v)}"


@dataclass(frozen=True)
class Const(Spec):
    value: Any

    @property
    def name(self) -> str:  # type: ignore[override]
        return repr(self.value)

    def problem(self, v: Any) -> str | None:
        return None if v == self.value and type(v) is type(self.value) else f"must be {self.name}"


@dataclass(frozen=True)
class Record(Spec):
    """A map with these required and optional fields (others are left alone)."""

    required: Mapping[str, Spec] = field(default_factory=dict)
    optional: Mapping[str, Spec] = field(default_factory=dict)
    name: str = "a map"

    def problem(self, v: Any) -> str | None:
        if type(v) is not dict:
            return f"must be {self.name}, not {_shown(v)}"
        for key, spec in self.required.items():
            if key not in v:
                return f"field {key!r} is missing"
            p = spec.problem(v[key])
            if p is not None:
                return f"field {key!r} {p}"
        for key, spec in self.optional.items():
            if key in v:
                p = spec.problem(v[key])
                if p is not None:
                    return f"field {key!r} {p}"
        return None


def _shown(v: Any) -> str:
    if type(v) is float:
        return repr(v)
    text = repr(v)
    return f"{type(v).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


INT = Type((int,), "an integer")
STR = Type((str,), "a string")
BOOL = Type((bool,), "a boolean")
BYTES = Type((bytes,), "bytes")
MAP = Type((dict,), "a map")
NONE = Type((type(None),), "null")
ANY = Spec()
NUMBER = _Float()
SCORE = _Float(neg_inf=True)
IDS = _Ids()


def optional(spec: Spec) -> Spec:
    return OneOf((spec, NONE))


REQ = optional(INT)  # a record's request id (None: a call no request claims)

_SPECS: dict[Any, Spec] = {int: INT, str: STR, bool: BOOL, bytes: BYTES, list[int]: IDS, list[bytes]: ListOf(BYTES),
                           int | None: REQ}


def spec_of(record_type: type) -> Record:
    """The schema of a typed record (a TypedDict of badc_trace/records.py): its required and optional
    fields with their types; `type` is what the record is dispatched on, so it is not a field here."""
    hints = typing.get_type_hints(record_type)
    try:
        fields = {k: _SPECS[t] for k, t in hints.items() if k != "type"}
    except KeyError as e:
        raise TypeError(f"{record_type.__name__}: no schema for the field type {e}") from None
    optional_keys = record_type.__optional_keys__  # type: ignore[attr-defined]
    return Record({k: v for k, v in fields.items() if k not in optional_keys},
                  {k: v for k, v in fields.items() if k in optional_keys})


# The record types every engine's probe writes (badc_trace/records.py), from the probes' own types.
SHARED: dict[str, Record] = {
    **{kind: spec_of(t) for kind, t in SHARED_TYPES.items() if kind not in ("request", "return")},
    "counts": Record(optional={str(c): INT for c in Counter}),
}


def extends(kind: str, required: Mapping[str, Spec] | None = None,
            optional: Mapping[str, Spec] | None = None) -> Record:
    """An engine's `request` or `return` record: the shared envelope (badc_trace/records.py) with the
    engine's own fields."""
    base = spec_of(SHARED_TYPES[kind])
    return Record({**base.required, **(required or {})}, {**base.optional, **(optional or {})})


@dataclass
class SchemaCheck:
    """Records of types this reader does not know, skipped in files of a newer minor version."""

    skipped: dict[str, int] = field(default_factory=dict)

    def left_unchecked(self) -> list[str]:
        return [f"{n:,} record(s) of type {t!r}, which this reader (trace format {FORMAT_VERSION[0]}."
                f"{FORMAT_VERSION[1]}) does not know, were skipped" for t, n in sorted(self.skipped.items())]


def checked(reader: TraceReader, engine: str, schema: Mapping[str, Record],
            check: SchemaCheck | None = None) -> Iterator[dict[str, Any]]:
    """The reader's records, each checked against `schema` (the engine's record types) and SHARED. Types
    unknown here are skipped into `check` in a file of a newer minor version (refused without `check`)."""
    missing = [kind for kind in ("request", "return") if kind not in schema]
    if missing:  # every probe writes them (badc_trace/records.py): an engine's schema extends them
        raise ValueError(f"engine {engine!r}: its record schema has no {' or '.join(map(repr, missing))} type")
    schemas = {**SHARED, **schema}
    version = reader.header.get("version", [1, 0])
    newer = version[0] == FORMAT_VERSION[0] and version[1] > FORMAT_VERSION[1]
    for rec in reader:
        kind = rec["type"]
        spec = schemas.get(kind)
        if spec is None:
            if newer and check is not None:
                check.skipped[kind] = check.skipped.get(kind, 0) + 1
                continue
            raise TraceFormatError(reader.path, reader.chunk_offset,
                                   f"record {reader.chunk_record} of chunk: type {kind!r} is not a record of "
                                   f"engine {engine!r}, which the header names (its types: "
                                   f"{', '.join(sorted(schemas))}); a trace of another engine relabelled?")
        p = spec.problem(rec)
        if p is not None:
            raise TraceFormatError(reader.path, reader.chunk_offset,
                                   f"record {reader.chunk_record} of chunk ({kind!r} record): {p}")
        yield rec
