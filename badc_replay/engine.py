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
- the probe (badc_trace) exposes `last_request`, the request it finished last, with its `crash`.

Live means "runs the engine" (`harness`, `collect`, `reference_law`, `hypothesis_law`,
`simulator_check`, `check_native`, `check_records`, `replay_context`, `score_request`); offline means
"reads a config, an outcome or a trace only" (`parse_config`, `predicate`, `check_request`).
"""

from __future__ import annotations

import importlib.metadata
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pydantic
import typing_extensions

from badc_replay.arms import ArmResult, ArmSpec, collect_arm
from badc_replay.contract import CALL_TYPES, Violation
from badc_replay.diff import LogicalCall, processor_calls
from badc_replay.enumeration import ExactLaw
from badc_replay.exact import UNSUPPORTED, ExactUnavailable, SpeculativeLaw
from badc_replay.schema import Record
from badc_replay.scores import RequestScores, ScoresUnavailable
from badc_replay.text import Decoder, pieces_decoder
from badc_trace.registry import nearest

# Keys of a campaign `[[config]]` that badc itself reads; every other key is the engine's.
CAMPAIGN_KEYS = ("id", "engine", "build", "role", "priority", "stratum", "hypothesis", "predicates", "repair",
                 "applied", "variants", "variant_of")


class ConfigError(ValueError):
    """A config that does not validate: which config, which key, what is wrong, the nearest valid key."""

    def __init__(self, config_id: str, problems: list[str]):
        self.config_id, self.problems = config_id, problems
        super().__init__(f"config {config_id}: " + "; ".join(problems))


def strict(cls: type) -> type:
    """A pydantic dataclass that refuses unknown keys and values of the wrong type."""
    return pydantic.dataclasses.dataclass(cls, config=pydantic.ConfigDict(extra="forbid", strict=True))


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


@dataclass(frozen=True)
class SimulatorCheck:
    """How far the hypothesis simulator with the contract's reads is from P, under a named metric."""

    metric: str  # e.g. "max abs difference" or "TV distance"
    value: float


_last_harness: list[tuple[tuple[Any, ...], Any]] = []  # (engine, config, arm, patches) and the last shard's harness


class Engine(ABC):
    """One engine's offline and live sides (see the module docstring for the rules)."""

    name: ClassVar[str]  # the same name in every layer: campaign files, traces, builds.toml, probes
    package: ClassVar[str]  # the distribution whose version is the build
    config_class: ClassVar[type]  # a `strict` dataclass with an `id` field: the engine's config keys
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

    def parse_config(self, d: Mapping[str, Any]) -> Any:
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
        return list(self.config_class.__pydantic_fields__)

    def check_native(self, cfg: Any) -> list[str]:
        """Live: problems with engine-native keywords (`generate()` / `SamplingParams` keys) that only the
        installed engine can judge; run under the build's interpreter before a campaign is sealed."""
        return []

    def refusal(self, cfg: Any) -> str | None:
        """Live: the engine's own message where it refuses this config with speculation on (a documented
        limitation: the config is reported as refused, never decided), else None."""
        return None

    # -- the build (live) -------------------------------------------------------------------------

    def version(self) -> str:
        return importlib.metadata.version(self.package)

    def probe(self) -> Any:
        """The engine's instrumentor (badc_trace), from the probes registry."""
        from badc_trace.registry import probe_class

        return probe_class(self.name)()

    # -- drawing (live) ---------------------------------------------------------------------------

    @abstractmethod
    def harness(self, cfg: Any, speculative: bool) -> Any:
        """An object whose `draw(seed) -> outcome` (or, with `batch` > 1, `draw(seeds) -> outcomes`) runs
        one request as a user would, and whose `repair_target` is what a repair's `apply()` patches."""

    def trace_config(self, cfg: Any, arm: str) -> dict[str, Any]:
        """What a trace header holds of the config: what `check_request` and `replay_context` read."""
        from dataclasses import asdict

        return {**asdict(cfg), "arm": arm}

    def returns_records(self, cfg: Any) -> bool:
        """Whether the config asks the engine for records (logprobs, scores): channel R."""
        return False

    def check_records(self, cfg: Any, harness: Any, trace_path: str) -> dict[str, Any]:
        """Live, channel R: the returned records of a finished trace against their documented values
        (`draws`, `mismatch`, `positions`, `first_mismatch`)."""
        raise NotImplementedError(f"engine {self.name}: no check of returned records")

    def collect(self, cfg: Any, arm: str, draws: int, campaign_seed: int, *, trace_path: str | None = None,
                level: str | None = None, repair: str | None = None, start: int = 0,
                progress: Callable[..., None] | None = None, seed_arm: str | None = None,
                seal: str = "", applied: Sequence[str] = ()) -> ArmResult:
        """Draws `start .. start + draws - 1` of one arm (`off*` without speculation, `on*`, `repaired`),
        probed and traced; the trace is replayed against the contract (level calls or full).
        `applied` are frozen repairs taken as part of the build under test (every arm gets them, in order,
        before the arm's own `repair`); the trace header names them.
        `seed_arm` draws with another arm's seeds (a repaired arm on the on arm's seeds, for `badc diff`)."""
        from badc_replay.repairs import load_intervention

        made: dict[str, Any] = {}
        patches = [*applied, *([repair] if repair is not None else [])]

        def setup() -> tuple[Callable[..., Any], Any]:
            h = made["h"] = self.process_harness(cfg, arm, patches)
            undos = [load_intervention(rid).apply(h.repair_target) for rid in patches]

            def undo() -> None:  # the last applied first
                for u in reversed(undos):
                    if callable(u):
                        u()
            return h.draw, undo if undos else None

        check = None
        if self.returns_records(cfg):
            def check(path: str) -> dict[str, Any]:
                return self.check_records(cfg, made["h"], path)

        header = self.trace_config(cfg, arm) | ({"applied": list(applied)} if applied else {})
        try:
            res = collect_arm(ArmSpec(cfg.id, arm, draws, campaign_seed, start, seed_arm), self.probe(), setup,
                           engine=self.name, build=self.version(), level=level or self.trace_level, seal=seal,
                           trace_path=trace_path, trace_config=header, progress=progress,
                           progress_every=self.progress_every, records=check, batch=self.batch)
        except BaseException:
            _last_harness.clear()  # an engine that failed a draw may not serve another
            raise
        return res

    def process_harness(self, cfg: Any, arm: str, patches: Sequence[str] = ()) -> Any:
        """This process's harness for the config, arm and patches: the last one made, when it is for the
        same (the shards of a chain of --anytime looks), else a new one, kept for the next. Draws are
        seeded by their index; a chain's next shard meets the engine state (llama.cpp's KV cache) that
        every request after an arm's first already meets. Reuse saves the engine's start, and vLLM allows
        few engines per process. Keyed by arm and patches, not only by speculation: a repair may have no
        undo, and the state one arm leaves must not reach another arm's trace."""
        key = (self.name, cfg, arm, tuple(patches))
        if not (_last_harness and _last_harness[0][0] == key):
            _last_harness.clear()
            _last_harness.append((key, self.harness(cfg, speculative=not arm.startswith("off"))))
        return _last_harness[0][1]

    # -- laws (live) ------------------------------------------------------------------------------

    def enumerable(self, cfg: Any) -> bool:
        """Whether P can be enumerated: the config's model is an embedded tiny one. Any other model (a named
        checkpoint, a path) is decided on an event family frozen from a sealed pilot, without P."""
        from badc_trace.checkpoints import enumerable

        return enumerable(getattr(cfg, "model", "tiny"))

    @abstractmethod
    def reference_law(self, cfg: Any) -> ExactLaw:
        """P: the exact law of returned outputs of sequential decoding (the kernel adapter, A1-A4)."""

    def speculative_law(self, cfg: Any, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
        """The exact channel: mu, the law of returned outcomes of the live speculation-on engine (with the
        frozen repairs `patches` applied, in order, as an arm gets them), enumerated with only the engine's
        random draws scripted. `soundness`: leaves to re-run (the soundness pass).
        Raises ExactUnavailable (NOT_ENUMERABLE or UNSUPPORTED, with the reason) where it cannot be done
        soundly; an engine without the capability is UNSUPPORTED."""
        raise ExactUnavailable(UNSUPPORTED, f"engine {self.name} has no exact channel (Engine.speculative_law)")

    def outcome_texts(self, cfg: Any, outcomes: Sequence[str]) -> dict[str, str]:
        """Live: each outcome's returned text, decoded by the engine's tokenizer, for reports (default: none)."""
        return {}

    def hypothesis_law(self, cfg: Any, hypothesis: str) -> ExactLaw:
        raise ValueError(f"config {cfg.id}: unknown {self.name} hypothesis {hypothesis!r} "
                         f"({nearest(hypothesis, list(self.hypotheses))})")

    def simulator_check(self, cfg: Any) -> SimulatorCheck:
        """The hypothesis simulator with the contract's reads against P (`simulator_metric`)."""
        raise NotImplementedError(f"engine {self.name}: no hypothesis simulator")

    # -- predicates and contract replay (offline) -------------------------------------------------

    def predicate(self, name: str, cfg: Any) -> Callable[[str], bool]:
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
