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
__all__ = ["CAMPAIGN_KEYS", "ConfigError", "Engine", "EngineConfig", "Harness", "SimulatorCheck", "nearest", "strict",
           "validation_problems"]

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


class Engine(ABC, Generic[C]):
    """One engine's offline and live sides (see the module docstring for the rules), generic in its
    config class: `class MyEngine(Engine[MyConfig])`."""

    name: ClassVar[str]  # the same name in every layer: campaign files, traces, builds.toml, probes
    package: ClassVar[str]  # the distribution whose version is the build
    config_class: type[C]  # a `strict` dataclass with an `id` field: the engine's config keys
    trace_level: ClassVar[str] = "calls"  # the trace level decision arms are recorded at
    call_types: ClassVar[tuple[str, ...]] = CALL_TYPES  # record types that are calls of the contract
    # record type -> its typed schema (badc_replay/schema.py), checked before any check reads a record;
    # None: not declared, so replay refuses the engine's traces rather than read unchecked records
    record_schema: ClassVar[Mapping[str, Record] | None] = None
    hypotheses: ClassVar[Mapping[str, Any]] = {}  # executable hypotheses: id -> the simulator's switches
    predicates: ClassVar[tuple[str, ...]] = ()  # registered witness predicates
    simulator_metric: ClassVar[str] = "max abs difference"
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

    def returns_records(self, cfg: C) -> bool:
        """Whether the config asks the engine for records (logprobs, scores): channel R."""
        return False

    def check_records(self, cfg: C, harness: Harness, trace_path: str) -> dict[str, Any]:
        """Live, channel R: the returned records of a finished trace against their documented values
        (`draws`, `mismatch`, `positions`, `first_mismatch`)."""
        raise NotImplementedError(f"engine {self.name}: no check of returned records")

    # -- laws (live) ------------------------------------------------------------------------------

    def enumerable(self, cfg: C) -> bool:
        """Whether P can be enumerated: the config's model is an embedded tiny one. Any other model (a named
        checkpoint, a path) is decided on an event family frozen from a sealed pilot, without P."""
        from badc_trace.checkpoints import enumerable

        return enumerable(getattr(cfg, "model", "tiny"))

    @abstractmethod
    def reference_law(self, cfg: C) -> ExactLaw:
        """P: the exact law of returned outputs of sequential decoding (the kernel adapter, A1-A4)."""

    def speculative_law(self, cfg: C, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
        """The exact channel: mu, the law of returned outcomes of the live speculation-on engine (with the
        frozen repairs `patches` applied, in order, as an arm gets them), enumerated with only the engine's
        random draws scripted. `soundness`: leaves to re-run (the soundness pass).
        Raises ExactUnavailable (NOT_ENUMERABLE or UNSUPPORTED, with the reason) where it cannot be done
        soundly; an engine without the capability is UNSUPPORTED."""
        raise ExactUnavailable(UNSUPPORTED, f"engine {self.name} has no exact channel (Engine.speculative_law)")

    def outcome_texts(self, cfg: C, outcomes: Sequence[str]) -> dict[str, str]:
        """Live: each outcome's returned text, decoded by the engine's tokenizer, for reports (default: none)."""
        return {}

    def hypothesis_law(self, cfg: C, hypothesis: str) -> ExactLaw:
        raise ValueError(f"config {cfg.id}: unknown {self.name} hypothesis {hypothesis!r} "
                         f"({nearest(hypothesis, list(self.hypotheses))})")

    def simulator_check(self, cfg: C) -> SimulatorCheck:
        """The hypothesis simulator with the contract's reads against P (`simulator_metric`)."""
        raise NotImplementedError(f"engine {self.name}: no hypothesis simulator")

    # -- predicates and contract replay (offline) -------------------------------------------------

    def predicate(self, name: str, cfg: C) -> Callable[[str], bool]:
        """A registered witness predicate: a pure function of an outcome string, True when it violates."""
        raise ValueError(f"config {cfg.id}: unknown {self.name} predicate {name!r} "
                         f"({nearest(name, list(self.predicates))})")

    def replay_context(self, header: Mapping[str, Any], vocab: list[bytes] | None = None) -> tuple[Any, str | None]:
        """What `check_request` needs beyond the records (a kernel, for checks that replay the engine; the
        trace's token pieces, `vocab`, for checks that read text), or None and why a part of the contract
        cannot be checked here."""
        return None, None

    def decoder(self, header: Mapping[str, Any], vocab: list[bytes] | None) -> Decoder | None:
        """Offline: token ids -> text for messages, from the trace's vocabulary record (`vocab`, when the
        probe wrote one); an engine whose traces name their tokenizer otherwise may override it."""
        return pieces_decoder(vocab) if vocab else None

    def exposure(self, records: list[dict[str, Any]]) -> Mapping[str, bool]:
        """Offline: for each parameter of this request that speculation can meet, whether it acted on a
        draft (a constraint masked a draft token, a stop was reached inside a block of drafts): exposure,
        reported beside each decision, since a parameter that never met a draft was not tested by
        speculation. Default: nothing recorded."""
        return {}

    def logical_calls(self, records: list[dict[str, Any]]) -> list[LogicalCall]:
        """Offline: the request's calls that sequential decoding fixes by their logical prefix, for
        `badc diff --by-prefix` (default: records that carry the ids they saw and `logical_len`)."""
        return processor_calls(records)

    def score_request(self, request: int, records: list[dict[str, Any]], context: Any) -> RequestScores:
        """Live: the score-level study of one request (badc_replay/scores.py), with the context
        `replay_context` built. Engines whose traces carry no scores have none."""
        raise ScoresUnavailable(f"{self.name}: no score-level study (its traces record no processor scores)")

    @abstractmethod
    def check_request(self, records: list[dict[str, Any]], config: Mapping[str, Any],
                      context: Any = None) -> list[Violation]:
        """The violations of one request's records, in trace order (D1-D4): which call, which prefix,
        what was expected, what was seen."""


def _members(cls: type) -> set[str]:
    return {n for n in [*vars(cls), *getattr(cls, "__annotations__", {})] if not n.startswith("_")}


def protocol_problems(engine: Engine) -> list[str]:
    """What keeps `engine` from the protocol, checked when it is registered (as pluggy checks hooks): a public
    member the protocol does not have (a misspelled override would be silently ignored), an override whose
    parameters are not the protocol's, a missing `name`, `package` or `config_class`, hypotheses or
    predicates declared without the method that implements them."""
    protocol = _members(Engine)
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
    for declared, method in (("hypotheses", "hypothesis_law"), ("predicates", "predicate")):
        if getattr(engine, declared) and getattr(type(engine), method) is getattr(Engine, method):
            problems.append(f"{declared!r} are declared but {method!r} is not implemented")
    return problems
