"""The toy engine (badc_toy) behind the engine protocol: the worked example of docs/engines/toy.md.

The engine is its own kernel adapter: all its randomness goes through one `sample(probs)` function,
so `enumerate_law` runs it with scripted samples. Speculation off gives P (A1-A4 hold by construction:
the same prompt, processors made fresh for every request and replayed along each prefix, the same stop
rules and return map). Speculation on with a planted defect gives that defect's executable hypothesis;
speculation on without one must reproduce P exactly (`simulator_check`).

Contract replay (offline, no engine needed): D1, each processor call saw its row's logical prefix; D2,
a stateful processor's state after a call equals a fresh one's replayed along that prefix; D3, no stop
was passed between two stop checks. Channel R (D4): returned log-probabilities against the model's
log-softmax at each token's logical prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Annotated, Any, Literal, Required

import numpy as np
import pydantic
from typing_extensions import TypedDict

from badc_replay.engine import Engine, Harness, Predicate, SimulatorCheck, strict
from badc_replay.enumeration import ExactLaw, enumerate_law
from badc_replay.exact import SpeculativeLaw
from badc_replay.records import RecordTally, returns_with_records
from badc_replay.schema import ANY, BOOL, IDS, INT, MAP, NUMBER, REQ, SCORE, STR, ListOf, Record, extends
from badc_replay.violations import Violation
from badc_trace.outcomes import format_outcome, parse_outcome

RECORD_TOLERANCE = 1e-9  # float64 throughout: replay recomputes the same numbers


@pydantic.with_config(pydantic.ConfigDict(extra="forbid"))
class ToyDrafter(TypedDict, total=False):
    method: Literal["prompt_lookup"]
    num_tokens: Annotated[int, pydantic.Field(ge=1)]
    max_ngram_size: Annotated[int, pydantic.Field(ge=1)]


@pydantic.with_config(pydantic.ConfigDict(extra="forbid"))
class ToyProcessor(TypedDict, total=False):
    name: Required[Literal["min_tokens", "ban", "no_repeat"]]
    min_tokens: int  # min_tokens
    tokens: list[int]  # ban


@pydantic.with_config(pydantic.ConfigDict(extra="forbid"))
class ToyStop(TypedDict):
    name: Literal["last_id"]
    token: int


@strict
class ToyConfig:
    """The toy part of a campaign config: `model` is "tiny" or "tiny:SEED" (the bigram table's seed),
    `prompt` token ids 0-4, `defects` the planted defects of the speculative arm (D1-D4)."""

    id: str
    model: str = "tiny"
    prompt: list[Annotated[int, pydantic.Field(ge=0, le=4)]] = field(default_factory=lambda: [0, 1, 2, 0, 1])
    max_new_tokens: Annotated[int, pydantic.Field(ge=1, le=8)] = 4
    drafter: ToyDrafter = field(default_factory=lambda: ToyDrafter(method="prompt_lookup", num_tokens=3,
                                                                   max_ngram_size=2))
    processors: list[ToyProcessor] = field(default_factory=list)
    stopping: list[ToyStop] = field(default_factory=list)
    defects: list[Literal["D1", "D2", "D3", "D4", "R1"]] = field(default_factory=list)
    logprobs: bool = False  # channel R: check the returned log-probabilities

    def __post_init__(self) -> None:
        for i, p in enumerate(self.processors):
            need = {"min_tokens": "min_tokens", "ban": "tokens"}.get(p["name"])
            if need and need not in p:
                raise ValueError(f"key 'processors.{i}.{need}' is required by the {p['name']} processor")
        try:
            self.seed  # noqa: B018 - a model that is not a tiny spec is refused with the config
        except ValueError as e:  # ModelSpecError included
            raise ValueError(f"key 'model': {e}") from None

    @property
    def seed(self) -> int:
        from badc_trace.tiny import parse_model_spec

        seed = parse_model_spec("toy", self.model)
        if seed is None:
            raise ValueError(f"config {self.id}: the toy engine has tiny models only ('tiny' or 'tiny:SEED')")
        return seed


def make_engine(cfg: ToyConfig, speculative: bool, defects: tuple[str, ...] | None = None) -> Any:
    from badc_toy import ToyEngine, ToyModel

    return ToyEngine(ToyModel(cfg.seed), speculative=speculative, num_tokens=cfg.drafter.get("num_tokens", 3),
                     max_ngram_size=cfg.drafter.get("max_ngram_size", 2), processors=cfg.processors,
                     stopping=cfg.stopping, defects=tuple(cfg.defects if defects is None else defects))


class ToyHarness:
    """One arm of a config: `draw(seed)` runs one request with its own seeded sampler."""

    def __init__(self, cfg: ToyConfig, speculative: bool):
        self.cfg = cfg
        self.engine = self.repair_target = make_engine(cfg, speculative, None if speculative else ())

    def draw(self, seed: int) -> str:
        from badc_toy.engine import rng_sampler

        try:
            sample = rng_sampler(seed, stale="R1" in self.engine.defects)
            tokens, finish, _ = self.engine.generate(self.cfg.prompt, self.cfg.max_new_tokens, sample)
        except Exception as e:  # raised to the caller: a crash outcome
            return format_outcome([], f"crash:{type(e).__name__}")
        return format_outcome(tokens, finish)


def _law(engine: Any, cfg: ToyConfig) -> ExactLaw:
    def run(choose: Callable[[np.ndarray], int]) -> str:
        tokens, finish, _ = engine.generate(cfg.prompt, cfg.max_new_tokens, choose)
        return format_outcome(tokens, finish)

    return enumerate_law(run, what=f"config {cfg.id}")


def speculative_law(cfg: ToyConfig, patches: Sequence[str] = ()) -> SpeculativeLaw:
    """mu of the speculation-on arm as a user runs it (its planted defects included, the repairs
    `patches` applied): the engine's `sample` is its only draw, one per verification row it samples, so
    nothing is pruned; drafts proposed are counted at `_verified`."""
    from badc_replay.repairs import load_intervention

    h = ToyHarness(cfg, speculative=True)
    for rid in patches:
        load_intervention(rid).apply(h.repair_target)
    proposed = [0]
    verified = h.engine._verified

    def counting(drafts: list[int], accepted: int) -> None:
        proposed[0] += len(drafts)
        verified(drafts, accepted)

    h.engine._verified = counting
    law = _law(h.engine, cfg)
    return SpeculativeLaw(law.law, law.paths, proposed[0])


def check_request(records: list[dict[str, Any]], config: Mapping[str, Any]) -> list[Violation]:
    """D1 (each processor call's ids against its logical prefix), D2 (a stateful processor's state
    against a fresh one replayed along the prefix), D3 (stops passed between two stop checks)."""
    from badc_toy.engine import make_stop

    out: list[Violation] = []
    req = next((r for r in records if r["type"] == "request"), None)
    if req is None:
        return out
    prompt_len = len(req["prompt"])
    stops = [make_stop(s) for s in config.get("stopping", [])]
    checked = prompt_len  # committed ids up to here were checked for a stop
    for i, rec in enumerate(records):
        if rec["type"] == "processor":
            ids, n = rec["ids"], rec["logical_len"]
            if len(ids) != n:
                out.append(Violation(rec["req"], i, "D1", f"processor {rec['proc']} ({rec['name']}) at position "
                                     f"{n - prompt_len}", ids[:n], f"{n} ids (the logical prefix)",
                                     f"{len(ids)} ids, with unverified drafts {ids[n:]}"))
            if "state" in rec:
                expected = sorted(set(ids[:n][prompt_len:]))
                if rec["state"] != expected:
                    out.append(Violation(rec["req"], i, "D2", f"processor {rec['proc']} ({rec['name']}) at position "
                                         f"{n - prompt_len}", ids[:n], f"state {expected} (a fresh processor "
                                         "replayed along the prefix)", f"state {rec['state']}"))
        elif rec["type"] == "stop_check" and stops:
            ids = rec["ids"]
            for t in range(checked + 1, len(ids)):
                if any(stop(ids[:t]) for stop in stops):
                    out.append(Violation(rec["req"], i, "D3", f"stopping ({rec['where']})", ids[:t],
                                         f"stop after {t - prompt_len} new tokens",
                                         f"first evaluated at {len(ids) - prompt_len} new tokens, result "
                                         f"{rec['result']}"))
                    break
            checked = max(checked, len(ids))
    return out


def check_records(trace_path: str, cfg: ToyConfig) -> dict[str, Any]:
    """D4: each returned log-probability against the raw model's log-softmax at its logical prefix."""
    from badc_toy import ToyModel
    from badc_toy.engine import log_softmax

    model = ToyModel(cfg.seed)
    tally = RecordTally()
    for prompt, rec in returns_with_records(trace_path, lambda r: r.get("logprobs") is not None):
        tally.start_draw(rec.get("outcome"))
        for j, (tok, lp) in enumerate(zip(rec["tokens"], rec["logprobs"], strict=False)):
            documented = float(log_softmax(model.logits(prompt + rec["tokens"][:j]))[tok])
            tally.logprob(documented, lp)
            if abs(lp - documented) > RECORD_TOLERANCE:
                tally.mismatch(rec["req"], j + 1, token=tok, expected=documented, seen=lp)
    return tally.to_dict()


def _planted(defect: str) -> Callable[[ToyConfig], ExactLaw]:
    return lambda cfg: _law(make_engine(cfg, speculative=True, defects=(defect,)), cfg)


# The law of the engine with that defect planted (D4 changes returned records only, not the law).
HYPOTHESES = {f"H-{d}": _planted(d) for d in ("D1", "D2", "D3")}


def _min_tokens(cfg: ToyConfig) -> Predicate:
    """EOS before the min_tokens processor allows it."""
    m = max((p.get("min_tokens", 0) for p in cfg.processors if p["name"] == "min_tokens"), default=0)
    return lambda y: parse_outcome(y).code == "eos" and len(parse_outcome(y).tokens) < m


def _past_stop(cfg: ToyConfig) -> Predicate:
    """A stop token before the last returned token."""
    stops = {s["token"] for s in cfg.stopping}
    return lambda y: any(t in stops for t in parse_outcome(y).tokens[:-1])


def _max_new_tokens(cfg: ToyConfig) -> Predicate:
    """More tokens than asked for."""
    return lambda y: len(parse_outcome(y).tokens) > cfg.max_new_tokens


PREDICATES = {"min_tokens": _min_tokens, "past_stop": _past_stop, "max_new_tokens": _max_new_tokens}


# The toy probe's record types (badc_toy/probe.py) as typed schemas (badc_replay/schema.py).
RECORDS = {
    "request": extends("request", {"params": MAP}),
    "return": extends("return", {"finish_reason": STR}, {"logprobs": ListOf(NUMBER)}),
    "draft": Record({"req": REQ, "committed": IDS, "draft": IDS}),
    "processor": Record({"req": REQ, "proc": INT, "name": STR, "ids": IDS, "logical_len": INT},
                        {"state": ANY, "scores_out": ListOf(SCORE)}),
    "stop_check": Record({"req": REQ, "ids": IDS, "where": STR, "result": BOOL}),
}


class ToyEngineAdapter(Engine[ToyConfig]):
    name = "toy"
    package = "badc"
    record_schema = RECORDS
    config_class = ToyConfig
    hypotheses = HYPOTHESES
    predicates = PREDICATES
    simulator_metric = "max abs difference"

    def harness(self, cfg: ToyConfig, speculative: bool) -> ToyHarness:
        return ToyHarness(cfg, speculative)

    def trace_config(self, cfg: ToyConfig, arm: str) -> dict[str, Any]:
        return {"id": cfg.id, "arm": arm, "processors": cfg.processors, "stopping": cfg.stopping,
                "model": cfg.model}

    def returns_records(self, cfg: ToyConfig) -> bool:
        return cfg.logprobs

    def check_records(self, cfg: ToyConfig, harness: Harness, trace_path: str) -> dict[str, Any]:
        return check_records(trace_path, cfg)

    def reference_law(self, cfg: ToyConfig) -> ExactLaw:
        return _law(make_engine(cfg, speculative=False, defects=()), cfg)

    def speculative_law(self, cfg: ToyConfig, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
        return speculative_law(cfg, patches)

    def simulator_check(self, cfg: ToyConfig) -> SimulatorCheck:
        """Speculation on without a defect against P: sample-and-match is lossless, so 0 up to rounding."""
        p = self.reference_law(cfg).law
        q = _law(make_engine(cfg, speculative=True, defects=()), cfg).law
        return SimulatorCheck(self.simulator_metric, max(abs(p.get(y, 0.0) - q.get(y, 0.0)) for y in set(p) | set(q)))

    def check_request(self, records: list[dict[str, Any]], config: Mapping[str, Any],
                      context: Any = None) -> list[Violation]:
        return check_request(records, config)


ENGINE = ToyEngineAdapter()
