"""What a campaign worker hands the runner: typed results, written as JSON and validated when read back,
so a wrong or missing key is an error naming the file and the key, never a KeyError later in a decision."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pydantic
from typing_extensions import TypedDict

from badc_replay.validation import strict, validation_problems


class ResultError(ValueError):
    pass


@pydantic.with_config(pydantic.ConfigDict(extra="forbid"))
class Hypothesis(TypedDict):
    id: str
    law: dict[str, float]


@pydantic.with_config(pydantic.ConfigDict(extra="forbid"))
class Pilot(TypedDict):
    """The sealed pilot of a config without an exact law: speculation-off draws on seeds of their own."""

    draws: int
    arm: str
    outcomes: dict[str, int]


@strict
class LawsResult:
    """`laws/ID.json`: P, the registered hypothesis's law and the simulator check of one config; for a
    model that cannot be enumerated, no P (`reference` None) and the pilot the event family is frozen from."""

    id: str
    build: str
    reference: dict[str, float] | None
    paths: int
    elapsed_s: float
    support: int
    hypothesis: Hypothesis | None = None
    simulator_check: float | None = None
    simulator_metric: str | None = None
    pilot: Pilot | None = None
    # the digest of badc's drawing code that computed the laws or drew the pilot (as in shards); None before
    code: str | None = None


@strict
class ShardResult:
    """`shards/ID/ARM-START.json`: one shard's outcome counts, exercise, contract replay and records."""

    id: str
    arm: str
    start: int
    count: int
    outcomes: dict[str, int]
    proposed: int
    accepted: int
    violations: int
    contract: dict[str, Any] | None
    records: dict[str, Any] | None
    counters: dict[str, int]
    resumed: int
    elapsed_s: float
    # the worker's CPU seconds for the shard (all its threads): core-hours that a machine shared with
    # other work does not inflate, as it does elapsed_s; None in shards written before badc recorded it
    cpu_s: float | None = None
    # the digest of badc's drawing code that drew it (badc_replay.provenance); None in shards written before
    code: str | None = None


@pydantic.with_config(pydantic.ConfigDict(extra="forbid"))
class SoundnessResult(TypedDict):
    leaves: int
    mismatches: int
    rule: str


@pydantic.with_config(pydantic.ConfigDict(extra="forbid"))
class WitnessResult(TypedDict):
    """Where mu differs from P: the config's first on-arm draws (the campaign's seeds), traced and replayed,
    so the report can name the first call that broke the contract."""

    draws: int
    trace: str  # relative to the campaign folder: `badc replay` it, `badc diff` it
    violations: int  # draws whose replay found a contract violation
    contract: dict[str, Any] | None  # ContractResult.to_dict(): first_violation, left_unchecked, ...
    error: str | None  # the collection failed (the exact laws are kept): why


@strict
class ExactResult:
    """`exact/ID.json`: the exact channel's laws of one config, enumerated through the live engine: P (the
    speculation-off engine), mu (speculation on), mu of the repaired arm and each registered hypothesis's
    law. `status` is set (NOT_ENUMERABLE, UNSUPPORTED) with its `reason` where mu could not be enumerated
    soundly; the repaired arm's own status likewise. badc_check/exact.py compares them."""

    id: str
    build: str
    status: str | None
    reason: str | None
    reference: dict[str, float] | None
    on: dict[str, float] | None
    paths: int  # engine runs enumerated for mu
    proposed: int  # draft tokens proposed over mu's runs
    soundness: SoundnessResult | None
    mirrored: str | None
    repaired: dict[str, float] | None
    repaired_status: str | None
    hypotheses: dict[str, dict[str, float]]
    texts: dict[str, str]  # outcome -> its text, for the report's events
    seconds: dict[str, float]  # what each part took: reference, on, repaired, hypotheses
    code: str | None = None
    witness: WitnessResult | None = None  # only where TV(mu, P) exceeds the tolerance and witness draws were asked


def to_json(result: LawsResult | ShardResult | ExactResult) -> dict[str, Any]:
    d = asdict(result)
    if isinstance(result, LawsResult):  # optional parts are left out, as before, when there is no hypothesis
        d = {k: v for k, v in d.items() if v is not None or k == "reference"}
    return d


def read_result(path: Path, kind: type[LawsResult] | type[ShardResult] | type[ExactResult]) -> dict[str, Any]:
    """The result file at `path`, validated against `kind`, as the dict the runner merges."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ResultError(f"{path}: not a readable result ({e})") from None
    if not isinstance(raw, dict):
        raise ResultError(f"{path}: expected a JSON object")
    try:
        kind(**raw)
    except pydantic.ValidationError as e:
        raise ResultError(f"{path}: " + "; ".join(validation_problems(kind, e))) from None
    return raw
