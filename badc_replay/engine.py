"""The engine protocol: what badc needs from one engine's offline side, written once.

An engine is a subclass of `Engine` (docs/engines/protocol.md); the built-in ones live in
`badc_replay/engines/<name>` (a package by role, or one module), and an out-of-tree one registers
itself under the `badc.engines` entry point (badc_replay/registry.py). Generic code (collection, laws,
contract replay, the campaign runner, the CLI) calls only what is declared here.

Rules every engine keeps:

- its module imports nothing of the engine at module level: the main environment imports it to
  validate configs and evaluate predicates, where the engine is not installed;
- a request's records are contiguous in a trace (drafter records may interleave but carry the
  request id), and every record that is a call of the contract names its request;
- the probe (badc_trace) keeps the probe contract of `BaseInstrumentor` (docs/engines/protocol.md):
  requests through its `_new_request`/`_begin`/`_end` helpers, named counters.

Live means "runs the engine" (`harness`, `reference_law`, `hypothesis_law`,
`simulator_check`, `check_native`, `check_records`, `replay_context`, `score_request`); offline means
"reads a config, an outcome or a trace only" (`parse_config`, `predicate`, `check_request`).
"""

from __future__ import annotations

import importlib.metadata
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import pydantic

from badc_replay.calls import LogicalCall, processor_calls
from badc_replay.enumeration import ExactLaw, SimulatorCheck
from badc_replay.exact import UNSUPPORTED, ExactUnavailable, SpeculativeLaw
from badc_replay.schema import Record
from badc_replay.scores import RequestScores, ScoresUnavailable
from badc_replay.text import Decoder, pieces_decoder
from badc_replay.validation import ConfigError, nearest, strict, validation_problems
from badc_replay.violations import CALL_TYPES, Violation
from badc_trace.registry import probe_class

# Re-exported for engines, which take the protocol's helpers from here.
__all__ = ["CAMPAIGN_KEYS", "CAPABILITIES", "ConfigError", "Decoding", "Engine", "EngineConfig", "ExactChannel",
           "Exposure", "Harness", "Hypotheses", "LogicalCalls", "Predicate", "Predicates", "ReturnedRecords",
           "ScoreStudy", "SimulatorCheck", "capabilities", "nearest", "strict", "validation_problems"]

# Keys of a campaign `[[config]]` that badc itself reads; every other key is the engine's.
CAMPAIGN_KEYS = ("id", "engine", "build", "role", "priority", "stratum", "hypothesis", "predicates", "repair",
                 "applied", "variants", "variant_of")


class EngineConfig(Protocol):
    """What badc reads of every engine's config: a `strict` dataclass with an `id`."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    id: str


C = TypeVar("C", bound=EngineConfig)  # the engine's config class


class Harness(Protocol):
    """One arm of a config, made by `Engine.harness`: `draw(seed)` runs one request as a user would and
    returns its outcome (with `Engine.batch` > 1: `draw(seeds)`, the outcomes); `repair_target` is the
    object a repair's `apply()` patches."""

    repair_target: Any

    def draw(self, seed: Any) -> Any: ...


Predicate = Callable[[str], bool]  # a pure function of an outcome string, True when it violates


# -- optional capabilities ----------------------------------------------------------------------------
# Each is a mixin with the protocol's default (the capability absent); `Engine` is the required core with
# every mixin, so generic code may call any member, and `capabilities(engine)` says which ones an engine
# really offers (the conformance kit checks those and reports the others as skipped).


class Hypotheses(Generic[C]):
    """Executable hypotheses: each id a function of the config giving the law of the engine with that
    mechanism (a registry: the name and its implementation are one entry, so they cannot drift), and the
    simulator they run on checked against P."""

    hypotheses: ClassVar[Mapping[str, Callable[[Any], ExactLaw]]] = {}  # id -> (cfg -> its law)
    simulator_metric: ClassVar[str] = "max abs difference"

    def hypothesis_law(self, cfg: C, hypothesis: str) -> ExactLaw:
        """Live: the law of `hypothesis` (final: an engine registers hypotheses in `hypotheses`)."""
        return _registered(self, self.hypotheses, "hypothesis", hypothesis, cfg)(cfg)

    def simulator_check(self, cfg: C) -> SimulatorCheck:
        """Live: the hypothesis simulator with the contract's reads against P (`simulator_metric`)."""
        raise NotImplementedError(f"engine {_name(self)}: no hypothesis simulator")


class Predicates(Generic[C]):
    """Witness predicates a config may name: each a function of the config giving a `Predicate` (a
    registry, like `Hypotheses`)."""

    predicates: ClassVar[Mapping[str, Callable[[Any], Predicate]]] = {}  # name -> (cfg -> predicate)

    def predicate(self, name: str, cfg: C) -> Predicate:
        """Offline: the registered predicate `name` for `cfg` (final: an engine registers them in `predicates`)."""
        return _registered(self, self.predicates, "predicate", name, cfg)(cfg)


class ReturnedRecords(Generic[C]):
    """Channel R: returned records (logprobs, scores) against their documented values."""

    def returns_records(self, cfg: C) -> bool:
        """Whether the config asks the engine for records (logprobs, scores)."""
        return False

    def check_records(self, cfg: C, harness: Harness, trace_path: str) -> dict[str, Any]:
        """Live: the returned records of a finished trace against their documented values
        (`draws`, `mismatch`, `positions`, `first_mismatch`)."""
        raise NotImplementedError(f"engine {_name(self)}: no check of returned records")


class ExactChannel(Generic[C]):
    """The exact channel: mu, the law of the live speculation-on engine, enumerated."""

    def speculative_law(self, cfg: C, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
        """The law of returned outcomes of the live speculation-on engine (with the frozen repairs
        `patches` applied, in order, as an arm gets them), enumerated with only the engine's random draws
        scripted. `soundness`: leaves to re-run (the soundness pass).
        Raises ExactUnavailable (NOT_ENUMERABLE or UNSUPPORTED, with the reason) where it cannot be done
        soundly; an engine without the capability is UNSUPPORTED."""
        raise ExactUnavailable(UNSUPPORTED, f"engine {_name(self)} has no exact channel (Engine.speculative_law)")

    def outcome_texts(self, cfg: C, outcomes: Sequence[str]) -> dict[str, str]:
        """Live: each outcome's returned text, decoded by the engine's tokenizer, for reports (default: none)."""
        return {}


class ScoreStudy:
    """The score-level study of one request (`badc replay --scores`, badc_replay/scores.py)."""

    def score_request(self, request: int, records: list[dict[str, Any]], context: Any) -> RequestScores:
        """Live, with the context `replay_context` built. Engines whose traces carry no scores have none."""
        raise ScoresUnavailable(f"{_name(self)}: no score-level study (its traces record no processor scores)")


class Exposure:
    """Whether each parameter speculation can meet acted on a draft."""

    def exposure(self, records: list[dict[str, Any]]) -> Mapping[str, bool]:
        """Offline: for each parameter of this request that speculation can meet, whether it acted on a
        draft (a constraint masked a draft token, a stop was reached inside a block of drafts): exposure,
        reported beside each decision, since a parameter that never met a draft was not tested by
        speculation. Default: nothing recorded."""
        return {}


class LogicalCalls:
    """The calls sequential decoding fixes by their logical prefix, for `badc diff --by-prefix`."""

    def logical_calls(self, records: list[dict[str, Any]]) -> list[LogicalCall]:
        """Offline: default, records that carry the ids they saw and `logical_len`."""
        return processor_calls(records)


class Decoding:
    """Token ids -> text for messages."""

    def decoder(self, header: Mapping[str, Any], vocab: list[bytes] | None) -> Decoder | None:
        """Offline: from the trace's vocabulary record (`vocab`, when the probe wrote one); an engine whose
        traces name their tokenizer otherwise may override it."""
        return pieces_decoder(vocab) if vocab else None


CAPABILITIES: tuple[type, ...] = (Hypotheses, Predicates, ReturnedRecords, ExactChannel, ScoreStudy, Exposure,
                                  LogicalCalls, Decoding)


class Engine(Hypotheses[C], Predicates[C], ReturnedRecords[C], ExactChannel[C], ScoreStudy, Exposure, LogicalCalls,
             Decoding, ABC):
    """One engine's offline and live sides (see the module docstring for the rules), generic in its
    config class: `class MyEngine(Engine[MyConfig])`. The required core is declared here (a config
    class, a harness, the reference law, the contract check); the optional capabilities are the mixins
    above, each with its absent default."""

    name: ClassVar[str]  # the same name in every layer: campaign files, traces, builds.toml, probes
    package: ClassVar[str]  # the distribution whose version is the build
    config_class: type[C]  # a `strict` dataclass with an `id` field: the engine's config keys
    trace_level: ClassVar[str] = "calls"  # the trace level decision arms are recorded at
    call_types: ClassVar[tuple[str, ...]] = CALL_TYPES  # record types that are calls of the contract
    # record type -> its typed schema (badc_replay/schema.py), checked before any check reads a record;
    # None: not declared, so replay refuses the engine's traces rather than read unchecked records
    record_schema: ClassVar[Mapping[str, Record] | None] = None
    progress_every: ClassVar[int] = 1000  # draws between progress reports
    batch: ClassVar[int] = 1  # draws per harness call (engines that batch requests)

    # -- configs (offline) ------------------------------------------------------------------------

    def parse_config(self, d: Mapping[str, Any]) -> C:
        """The engine's config from a campaign `[[config]]` (badc's own keys left out), validated
        completely: an unknown key, a wrong type or a bad value is a ConfigError naming it."""
        cid = str(d.get("id", "?"))
        try:
            cfg = self.config_class(**{k: v for k, v in d.items() if k not in CAMPAIGN_KEYS or k == "id"})
        except pydantic.ValidationError as e:
            raise ConfigError(cid, validation_problems(self.config_class, e, CAMPAIGN_KEYS)) from None
        except (TypeError, ValueError) as e:
            raise ConfigError(cid, [str(e)]) from None
        return cfg

    def config_keys(self) -> list[str]:
        return list(getattr(self.config_class, "__pydantic_fields__", {}))

    def check_native(self, cfg: C) -> list[str]:
        """Live: problems with engine-native keywords (`generate()` / `SamplingParams` keys) that only the
        installed engine can judge; run under the build's interpreter before a campaign is sealed."""
        return []

    def refusal(self, cfg: C) -> str | None:
        """Live: the engine's own message where it refuses this config with speculation on (a documented
        limitation: the config is reported as refused, never decided), else None."""
        return None

    # -- the build (live) -------------------------------------------------------------------------

    def version(self) -> str:
        return importlib.metadata.version(self.package)

    def probe(self) -> Any:
        """The engine's instrumentor (badc_trace), from the probes registry."""
        return probe_class(self.name)()

    # -- drawing (live) ---------------------------------------------------------------------------

    @abstractmethod
    def harness(self, cfg: C, speculative: bool) -> Harness:
        """An object whose `draw(seed) -> outcome` (or, with `batch` > 1, `draw(seeds) -> outcomes`) runs
        one request as a user would, and whose `repair_target` is what a repair's `apply()` patches."""

    def trace_config(self, cfg: C, arm: str) -> dict[str, Any]:
        """What a trace header holds of the config: what `check_request` and `replay_context` read."""
        from dataclasses import asdict

        return {**asdict(cfg), "arm": arm}

    # -- laws (live) ------------------------------------------------------------------------------

    def enumerable(self, cfg: C) -> bool:
        """Whether P can be enumerated: the config's model is an embedded tiny one. Any other model (a named
        checkpoint, a path) is decided on an event family frozen from a sealed pilot, without P."""
        from badc_trace.checkpoints import enumerable

        return enumerable(getattr(cfg, "model", "tiny"))

    @abstractmethod
    def reference_law(self, cfg: C) -> ExactLaw:
        """P: the exact law of returned outputs of sequential decoding (the kernel adapter, A1-A4)."""

    # -- contract replay (offline) ------------------------------------------------------------------

    def replay_context(self, header: Mapping[str, Any], vocab: list[bytes] | None = None) -> tuple[Any, str | None]:
        """What `check_request` needs beyond the records (a kernel, for checks that replay the engine; the
        trace's token pieces, `vocab`, for checks that read text), or None and why a part of the contract
        cannot be checked here."""
        return None, None

    @abstractmethod
    def check_request(self, records: list[dict[str, Any]], config: Mapping[str, Any],
                      context: Any = None) -> list[Violation]:
        """The violations of one request's records, in trace order (D1-D4): which call, which prefix,
        what was expected, what was seen."""


def _name(engine: object) -> str:
    return str(getattr(engine, "name", type(engine).__name__))


def _registered(engine: object, registry: Mapping[str, Any], what: str, name: str, cfg: EngineConfig) -> Any:
    """`registry[name]`, or a ValueError naming the config and the nearest registered name."""
    if name not in registry:
        raise ValueError(f"config {cfg.id}: unknown {_name(engine)} {what} {name!r} ({nearest(name, list(registry))})")
    return registry[name]


def capabilities(engine: Engine) -> list[str]:
    """The optional capabilities `engine` offers: those whose registry it fills or a member of which its
    class overrides."""
    out = []
    for cap in CAPABILITIES:
        members = [n for n in vars(cap) if not n.startswith("_") and n not in FINAL]
        if any(getattr(type(engine), n) is not getattr(cap, n) for n in members):
            out.append(cap.__name__)
    return out


# Members an engine never overrides: their implementations are the registries' entries.
FINAL = {"hypothesis_law": "hypotheses", "predicate": "predicates"}


def _members(cls: type) -> set[str]:
    return {n for n in [*vars(cls), *getattr(cls, "__annotations__", {})] if not n.startswith("_")}


def protocol_problems(engine: Engine) -> list[str]:
    """What keeps `engine` from the protocol, checked when it is registered (as pluggy checks hooks): a public
    member the protocol does not have (a misspelled override would be silently ignored), an override whose
    parameters are not the protocol's, a missing `name`, `package` or `config_class`, hypotheses or
    predicates declared without the method that implements them."""
    protocol = set().union(*(_members(c) for c in Engine.__mro__ if c is not object))
    problems = []
    for cls in type(engine).__mro__:
        if cls is Engine or not issubclass(cls, Engine):
            break
        for n, member in vars(cls).items():
            if n.startswith("_"):
                continue
            if n not in protocol:
                problems.append(f"{cls.__qualname__}.{n} is not a member of the protocol "
                                f"({nearest(n, sorted(protocol))})")
                continue
            if n in FINAL:
                problems.append(f"{cls.__qualname__}.{n} overrides a final member: register implementations "
                                f"in {FINAL[n]!r} instead")
                continue
            base = getattr(Engine, n, None)
            if inspect.isfunction(member) and inspect.isfunction(base):
                want, got = list(inspect.signature(base).parameters), list(inspect.signature(member).parameters)
                if want != got:
                    problems.append(f"{cls.__qualname__}.{n}({', '.join(got)}): the protocol's parameters are "
                                    f"({', '.join(want)})")
    for attr in ("name", "package"):
        if not isinstance(getattr(engine, attr, None), str):
            problems.append(f"{attr!r} is not set (a string)")
    fields = getattr(getattr(engine, "config_class", None), "__pydantic_fields__", None)
    if fields is None or "id" not in fields:
        problems.append("'config_class' is not a `strict` dataclass with an `id` field")
    for registry in FINAL.values():
        entries = getattr(engine, registry)
        if not isinstance(entries, Mapping):
            problems.append(f"{registry!r} is not a mapping of names to implementations")
            continue
        problems += [f"{registry}[{k!r}] is not callable (a function of the config)" for k, v in entries.items()
                     if not callable(v)]
    return problems
