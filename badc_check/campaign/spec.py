"""The campaign file: read, validated completely, and the `Campaign` it describes (docs/interfaces.md,
"Campaign file"; `[defaults]` is merged into every `[[config]]`, `[campaign] include` brings other files'
configs). Every key is checked before anything is sealed or run: an unknown key, a wrong type or a bad
value is an error naming the file, the config id, the key and the nearest valid key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic

from badc_check.builds import load_builds
from badc_check.confirmation import least_confirm_draws
from badc_check.events import PILOT_RULE
from badc_check.exact import EXACT_SOUNDNESS, EXACT_WITNESS
from badc_check.looks import planned_looks
from badc_check.selection import confirmation_m
from badc_replay.exact import EXACT_TOL
from badc_replay.registry import UnknownEngineError, engine_names, get_engine
from badc_replay.repairs import known_repairs
from badc_replay.validation import ConfigError, nearest, strict, validation_problems
from badc_trace.checkpoints import enumerable
from badc_trace.tiny import ModelSpecError, parse_model_spec

ROLES = ("probe", "negative-control", "positive-control")
BUILTIN = Path(str(files("badc_check") / "campaigns" / "builtin.toml"))
SHARD = 20_000  # draws per job
PILOT = 2_000  # draws of a sealed pilot (models without an exact law)
TOP_LEVEL = ("campaign", "defaults", "config")


class CampaignError(ValueError):
    pass


@strict
class CampaignTable:
    """`[campaign]`."""

    name: str | None = None
    alpha: Annotated[float, pydantic.Field(gt=0, lt=1)] = 0.05
    threshold: Annotated[float, pydantic.Field(gt=0, lt=1)] = 0.01
    draws: Annotated[int, pydantic.Field(ge=1)] = 200_000
    seed: Annotated[int, pydantic.Field(ge=0)] = 0
    confirm_draws: Annotated[int, pydantic.Field(ge=0)] = 0
    shard: Annotated[int, pydantic.Field(ge=1)] = SHARD
    m: Annotated[int, pydantic.Field(ge=1)] | None = None
    include: list[str] = dataclasses.field(default_factory=list)
    anytime: bool = False
    # draws of the sealed pilot that freezes the event family of a config whose model has no exact law
    pilot: Annotated[int, pydantic.Field(ge=100)] = PILOT
    # RQ3's second cell: stage S3 also confirms what the decisions without A_H select (selection.py)
    confirm_without_hypothesis_events: bool = False
    # stage S3's unrepaired arm stops at its first planned look that recurs (confirmation.py)
    confirm_anytime: bool = False
    # the exact channel (badc_check/exact.py): "on" beside the sampled decisions, "only" instead of draws
    exact: Literal["off", "on", "only"] = "off"
    exact_tol: Annotated[float, pydantic.Field(gt=0, lt=1)] = EXACT_TOL
    # leaves of each enumeration re-run, the soundness pass (0: none at run time)
    exact_soundness: Annotated[int, pydantic.Field(ge=0)] = EXACT_SOUNDNESS
    # on-arm draws traced and replayed where mu differs from P: the first call that broke the contract
    exact_witness: Annotated[int, pydantic.Field(ge=0)] = EXACT_WITNESS


ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,79}$"


@strict
class ConfigKeys:
    """The keys of a `[[config]]` that badc reads itself (every other key is the engine's)."""

    # ids name files under the output folder: a safe character set, never a path (no "/", "..", space, NUL)
    id: Annotated[str, pydantic.Field(pattern=ID_PATTERN)]
    engine: Annotated[str, pydantic.Field(min_length=1)]
    build: Annotated[str, pydantic.Field(min_length=1)]
    role: Literal["probe", "negative-control", "positive-control"] = "probe"
    priority: int | None = None  # lower is confirmed first (selection.py)
    # an arm of a study's comparison (the paper's RQ3: "directed" against "random" selection): configs of
    # different strata get their own confirmation attempt per cause and build (selection.py)
    stratum: Annotated[str, pydantic.Field(min_length=1)] | None = None
    hypothesis: str | None = None
    predicates: list[str] = dataclasses.field(default_factory=list)
    repair: str | None = None
    # frozen repairs that are part of the build under test: applied to every arm alike (off, on, repaired,
    # confirmation), so a family is decided past a known defect; the repaired arm adds `repair` on top
    applied: list[str] = dataclasses.field(default_factory=list)
    # held-out transfer: the config stands for one config per variant (each a table of VARIANT_KEYS only,
    # so nothing else is retuned), expanded before the seal; `variant_of` names the config they came from
    variants: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    variant_of: str | None = None


VARIANT_KEYS = ("model", "prompt")  # what a variant may change: the model (its seed) and the prompt


@dataclass
class Campaign:
    path: str
    name: str
    alpha: float
    threshold: float
    draws: int
    seed: int
    confirm_draws: int
    configs: list[dict[str, Any]]
    shard: int = SHARD  # draws per job: changes how work is spread, never the draws or their seeds
    family_m: int | None = None  # the study's multiplicity family when it is larger than this roster
    anytime: bool = False  # stop a config at its first planned look with an eligible FAILS or VOID (looks.py)
    pilot: int = PILOT  # draws of the sealed pilot of each config without an exact law (a checkpoint, a path)
    confirm_without_hypothesis_events: bool = False  # S3 confirms the without-A_H cell's selection too
    confirm_anytime: bool = False  # S3's unrepaired arm stops at its first planned look that recurs
    exact: str = "off"  # the exact channel: off, on (beside the draws) or only (no draws)
    exact_tol: float = EXACT_TOL
    exact_soundness: int = EXACT_SOUNDNESS
    exact_witness: int = EXACT_WITNESS

    def exact_seal(self) -> str | None:
        """The exact channel's own seal (its tolerance and soundness pass), kept apart from the decisions'
        seal: the channel never changes a decision, so it may be added to a sealed folder later."""
        if self.exact == "off":
            return None
        return hashlib.sha256(json.dumps({"tol": self.exact_tol, "soundness": self.exact_soundness},
                                         sort_keys=True).encode()).hexdigest()

    @property
    def m(self) -> int:
        """Configurations in the multiplicity family: `[campaign] m`, or the roster (with its includes)."""
        return self.family_m or len(self.configs)

    @property
    def confirm_m(self) -> int:
        """The confirmation budget: one possible attempt per cause, build and stratum, in each confirmed cell."""
        return confirmation_m(self.configs) * (2 if self.confirm_without_hypothesis_events else 1)

    @property
    def confirm_draws_needed(self) -> int | None:
        """The least confirmation draws per arm that can confirm a repair, when the campaign's are fewer
        and some config has a repair to confirm (every attempt would end "not confirmed"); else None."""
        least = least_confirm_draws(self.alpha, self.confirm_m, looks=self.confirm_anytime)
        repairs = any(c.get("repair") for c in self.configs)
        return least if repairs and 0 < self.confirm_draws < least else None

    def seal(self) -> dict[str, Any]:
        """Hashes of everything a decision depends on, taken before the first decision draw."""
        def h(obj: Any) -> str:
            return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()

        settings = {"alpha": self.alpha, "threshold": self.threshold, "draws": self.draws, "seed": self.seed,
                    "confirm_draws": self.confirm_draws}
        if self.family_m is not None:  # only when set, so that earlier seals stay valid
            settings["m"] = self.family_m
        if any(needs_pilot(c) for c in self.configs):  # only then, so that earlier seals stay valid
            settings["pilot"] = {"draws": self.pilot, "arm": "off-pilot", "events": PILOT_RULE}
        if self.anytime:
            settings["anytime"] = {"looks": [look.to_dict() for look in planned_looks(self.draws)]}
        if self.confirm_without_hypothesis_events:  # only when set, so that earlier seals stay valid
            settings["confirm_cells"] = ["with A_H", "without A_H"]
        if self.confirm_anytime:  # only when set, so that earlier seals stay valid
            settings["confirm_anytime"] = {"looks": [look.to_dict() for look in planned_looks(self.confirm_draws)],
                                           "bounds_per_frozen_event": 6}
        parts = {"configs": {c["id"]: h(c) for c in self.configs},
                 "settings": h(settings),
                 "seed_roster": h({"seed": self.seed, "rule": "blake2b(seed|config|arm|index)"}),
                 "hypotheses": h({c["id"]: c.get("hypothesis") for c in self.configs}),
                 "repairs": h({c["id"]: c.get("repair") for c in self.configs})}
        return {"campaign": self.name, "seal": h(parts), "parts": parts}


def needs_pilot(config: dict[str, Any]) -> bool:
    """Whether a config's model has no exact law (a checkpoint, a path), so a sealed pilot fixes its events."""
    model = config.get("model", "tiny")
    return isinstance(model, str) and not enumerable(model)


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CampaignError(f"{path}: not found") from None
    except IsADirectoryError:
        raise CampaignError(f"{path}: is a folder, not a campaign file") from None
    except OSError as e:
        raise CampaignError(f"{path}: cannot be read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CampaignError(f"{path}: byte {e.start}: not UTF-8 text (TOML files are UTF-8)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CampaignError(f"{path}: not valid TOML: {e}") from None


def _check_config(config: dict[str, Any], from_defaults: set[str]) -> list[str]:
    """Every problem of one `[[config]]`, each naming its key (and `[defaults]` when the key came from there)."""
    def mark(problem: str) -> str:
        key = problem.split("'")[1].split(".")[0] if "'" in problem else ""
        return f"{problem} (set in [defaults])" if key in from_defaults else problem

    badc_keys = {f.name for f in dataclasses.fields(ConfigKeys)}
    problems = []
    try:
        ConfigKeys(**{k: v for k, v in config.items() if k in badc_keys})
    except pydantic.ValidationError as e:
        problems += validation_problems(ConfigKeys, e)
    name = config.get("engine")
    if not isinstance(name, str) or not name:
        return [mark(p) for p in problems]
    try:
        engine = get_engine(name)
    except UnknownEngineError:
        return [mark(p) for p in problems] + [f"key 'engine': unknown engine {name!r} "
                                               f"({nearest(name, engine_names())})"]
    try:
        engine.parse_config(config)
    except ConfigError as e:
        problems += e.problems
    build = config.get("build")
    builds = [b for b in load_builds().values() if b.engine == name]
    if isinstance(build, str) and build and build not in {b.version for b in builds}:
        problems.append(f"key 'build': no build {name}-{build} is declared in the engines' builds files "
                        f"({nearest(build, [b.version for b in builds]) if builds else 'it declares none of ' + name})")
    model = config.get("model", "tiny")
    if isinstance(model, str) and enumerable(model):
        try:
            parse_model_spec(name, model)
        except ModelSpecError as e:
            problems.append(f"key 'model': {e}")
    hypothesis, predicates = config.get("hypothesis"), config.get("predicates")
    if needs_pilot(config):
        for key in ("hypothesis", "predicates"):
            if config.get(key):
                problems.append(f"key {key!r}: needs an exact law, which model {config['model']!r} has not (only "
                                "embedded tiny models, 'tiny' or 'tiny:SEED', are enumerable); leave it out")
    if isinstance(hypothesis, str) and hypothesis not in engine.hypotheses:
        problems.append(f"key 'hypothesis': {engine.name} has no hypothesis {hypothesis!r} "
                        f"({nearest(hypothesis, list(engine.hypotheses))})")
    for p in predicates if isinstance(predicates, list) else ():
        if isinstance(p, str) and p not in engine.predicates:
            problems.append(f"key 'predicates': {engine.name} has no predicate {p!r} "
                            f"({nearest(p, list(engine.predicates))})")
    repairs, repair, applied = known_repairs(), config.get("repair"), config.get("applied")
    own = [r for r in repairs if r.startswith(f"{engine.name}/")]  # an intervention patches its own engine
    for key, rid in [("repair", repair)] + [("applied", r) for r in (applied if isinstance(applied, list) else [])]:
        if isinstance(rid, str) and rid not in own:
            problems.append(f"key {key!r}: no frozen repair {rid!r} for engine {engine.name} "
                            f"({nearest(rid, own) if own else 'it has none'})")
    if isinstance(applied, list) and (len(set(applied)) < len(applied) or repair in applied):
        problems.append(f"key 'applied': each frozen repair at most once, and not the config's `repair` too "
                        f"(got applied {applied}, repair {repair!r})")
    return [mark(p) for p in problems]


def _variants(config: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """A config with `variants` as its variants (ids `ID-V1`, `ID-V2`, ...: each the config with one variant's
    model and prompt, `variant_of` naming the config), else the config itself; and the problems of the key."""
    variants = config.get("variants")
    if variants is None:
        return [config], []
    if "variant_of" in config:
        return [config], ["key 'variant_of': set by badc when it expands `variants`, never in a file"]
    if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
        return [config], ["key 'variants': a non-empty array of tables, each with some of the keys "
                          f"{', '.join(VARIANT_KEYS)} (got {variants!r})"]
    problems = [f"key 'variants[{i}].{k}': a variant changes only {', '.join(VARIANT_KEYS)}, nothing else is "
                f"retuned ({nearest(k, list(VARIANT_KEYS))})"
                for i, v in enumerate(variants) for k in v if k not in VARIANT_KEYS]
    base = {k: v for k, v in config.items() if k != "variants"}
    out = [{**base, **v, "id": f"{config.get('id')}-V{i + 1}", "variant_of": config.get("id")}
           for i, v in enumerate(variants)]
    return out, problems


def _configs_of(path: str, doc: dict[str, Any], seen: tuple[str, ...]) -> list[dict[str, Any]]:
    """The file's [[config]] tables with its [defaults] merged in, then those of the files it includes
    (`[campaign] include`, paths relative to the file; each brings its own [defaults]). Every config is
    validated; all problems of all configs are reported together."""
    for key in doc:
        if key not in TOP_LEVEL:
            raise CampaignError(f"{path}: unknown table [{key}] ({nearest(key, TOP_LEVEL)})")
    defaults = doc.get("defaults", {})
    raw = doc.get("config", [])
    if not isinstance(defaults, dict):
        raise CampaignError(f"{path}: [defaults] must be a table")
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise CampaignError(f"{path}: [[config]] must be an array of tables")
    include = _table(path, doc).include
    configs, problems = [], []
    for i, c in enumerate(raw):
        merged = {**defaults, **c}
        cid = merged.get("id")
        where = f"{path}: config {cid}" if isinstance(cid, str) and cid else f"{path}: config[{i}]"
        expanded, bad = _variants(merged)
        problems += [f"{where}: {p}" for p in bad]
        for one in expanded if not bad else ():
            at = f"{where}, variant {one['id']}" if "variant_of" in one else where
            problems += [f"{at}: {p}" for p in _check_config(one, set(defaults) - set(c))]
        configs += expanded
    if problems:
        raise CampaignError("\n".join(problems))
    for rel in include:
        sub = str(Path(path).parent / rel)
        if Path(sub).resolve() in {Path(p).resolve() for p in seen}:
            raise CampaignError(f"{path}: include {rel!r} includes itself (through {' -> '.join(seen)})")
        configs += _configs_of(sub, _read_toml(sub), (*seen, sub))
    return configs


def _table(path: str, doc: dict[str, Any]) -> CampaignTable:
    raw = doc.get("campaign", {})
    if not isinstance(raw, dict):
        raise CampaignError(f"{path}: [campaign] must be a table")
    try:
        return CampaignTable(**raw)
    except pydantic.ValidationError as e:
        raise CampaignError("\n".join(f"{path}: [campaign]: {p}"
                                       for p in validation_problems(CampaignTable, e))) from None


def load_campaign(path: str | Path, *, draws: int | None = None, confirm_draws: int | None = None,
                  anytime: bool | None = None, confirm_anytime: bool | None = None,
                  exact: str | None = None) -> Campaign:
    path = str(path)
    doc = _read_toml(path)
    table = _table(path, doc)
    configs = _configs_of(path, doc, (path,))
    if not configs:
        raise CampaignError(f"{path}: needs at least one [[config]] table (its own or an included file's)")
    ids = [c["id"] for c in configs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise CampaignError(f"{path}: duplicate config ids: {', '.join(dup)}")
    if table.m is not None and table.m < len(configs):
        raise CampaignError(f"{path}: [campaign] m must be an integer >= the {len(configs)} configs of the roster, "
                            f"got {table.m!r}")
    for name, v in (("--draws", draws), ("--confirm", confirm_draws)):
        if v is not None and v < (1 if name == "--draws" else 0):
            raise CampaignError(f"{name} must be {'positive' if name == '--draws' else '>= 0'}, got {v}")
    confirm_draws = confirm_draws if confirm_draws is not None else table.confirm_draws
    confirm_anytime = confirm_anytime if confirm_anytime is not None else table.confirm_anytime
    if confirm_anytime and not confirm_draws:
        raise CampaignError(f"{path}: confirm_anytime (stage S3 with looks) needs confirmation draws: set [campaign] "
                            "confirm_draws (or --confirm) above 0, or leave confirm_anytime out")
    return Campaign(path=path, name=table.name or Path(path).stem, alpha=table.alpha, threshold=table.threshold,
                    draws=draws if draws is not None else table.draws, seed=table.seed, confirm_draws=confirm_draws,
                    configs=configs, shard=table.shard, family_m=table.m,
                    anytime=anytime if anytime is not None else table.anytime, pilot=table.pilot,
                    confirm_without_hypothesis_events=table.confirm_without_hypothesis_events,
                    confirm_anytime=confirm_anytime, exact=exact or table.exact, exact_tol=table.exact_tol,
                    exact_soundness=table.exact_soundness, exact_witness=table.exact_witness)


def installed_only(campaign: Campaign, log: Callable[[str], None] | None = None) -> Campaign:
    """The campaign without the configs whose build is not set up here (the built-in campaign runs on
    every installed engine); refuses when nothing is left."""
    builds = load_builds()
    keep, dropped = [], []
    for c in campaign.configs:
        b = builds.get(f"{c['engine']}-{c['build']}")
        (keep if b is not None and b.installed else dropped).append(c)
    if dropped:
        (log or (lambda m: print(m, file=sys.stderr)))(
            "badc run: left out (build not set up): " + ", ".join(f"{c['id']} ({c['engine']}-{c['build']})"
                                                                   for c in dropped))
    if not keep:
        raise CampaignError("no engine build is set up: run `python3.11 tools/setup_envs.py`")
    return dataclasses.replace(campaign, configs=keep)


