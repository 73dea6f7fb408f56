"""The conformance kit: what every engine must do for badc, checked against the engine itself.

An engine's suite calls `check_engine(ENGINE, control, tmp_path)` with a plain negative control (a config
whose speculation-on law must be P: plain sampling, a drafter that proposes) and gets one AssertionError
naming every check that failed, or a `Conformance` whose checks say what passed and what the engine does
not offer (an optional capability it does not implement is `skipped`, never passed):

- `config`: the config parses, round-trips through its fields, and an unknown key is refused by name with
  the nearest valid key;
- `law`: P (`reference_law`) sums to one, with outcome strings badc can read;
- `simulator`: the hypothesis simulator with the contract's reads reproduces P (`simulator_check`), where
  the engine offers the `Hypotheses` capability;
- `predicates`: every registered predicate builds for the control (or refuses it by name) and gives a
  bool on each outcome of P;
- `arm`: a small speculation-on arm, drawn, traced and replayed: every draw a request, the contract held,
  every outcome in P's support;
- `drafting`: that arm's drafter proposed tokens (`proposed` and `accepted` counted by the probe);
- `unread`: a contract check that returns no violation without reading its request's records leaves the
  request unchecked, never held (the generic replay's guard, on this engine's own trace);
- `exact`: the exact channel, where the engine has one, is P within the default tolerance.

Live: it runs the engine, under the build's interpreter.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from badc_replay.arms import collect
from badc_replay.contract import replay_trace
from badc_replay.engine import ConfigError, Engine, capabilities
from badc_replay.exact import EXACT_TOL, ExactUnavailable, tv
from badc_replay.violations import HELD, NOT_READ, UNCHECKED
from badc_trace.outcomes import parse_outcome

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
LAW_TOL = 1e-9  # a law's total mass against one (float64 sums of path probabilities)
SIMULATOR_TOL = 1e-6  # the largest simulator difference of a built-in engine is below 1e-6 (transformers)


@dataclass(frozen=True)
class KitCheck:
    name: str
    status: str  # passed, failed, skipped
    detail: str


@dataclass(frozen=True)
class Conformance:
    engine: str
    config: str
    checks: tuple[KitCheck, ...]
    capabilities: tuple[str, ...] = ()  # the optional capabilities the engine offers (badc_replay.engine)

    @property
    def failed(self) -> list[KitCheck]:
        return [c for c in self.checks if c.status == FAILED]

    def by_name(self, name: str) -> KitCheck:
        return next(c for c in self.checks if c.name == name)

    def summary(self) -> str:
        return "\n".join(f"{c.status:7} {c.name}: {c.detail}" for c in self.checks)


def _config(engine: Engine, control: Mapping[str, Any]) -> tuple[Any, KitCheck]:
    cfg = engine.parse_config(control)
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    again = engine.parse_config(fields)
    if again != cfg:
        return cfg, KitCheck("config", FAILED, f"parse_config of the config's own fields gave {again!r}, not {cfg!r}")
    key = next((k for k in fields if k != "id"), None)
    if key is None:
        return cfg, KitCheck("config", FAILED, "the config class has no key but id")
    typo = key[:-1] if len(key) > 3 else key + "x"
    try:
        engine.parse_config({**control, typo: fields[key]})
    except ConfigError as e:
        if repr(typo) not in str(e) or key not in str(e):
            return cfg, KitCheck("config", FAILED, f"unknown key {typo!r} refused without naming it and {key!r}: {e}")
    else:
        return cfg, KitCheck("config", FAILED, f"unknown key {typo!r} was accepted")
    return cfg, KitCheck("config", PASSED, f"round trip of {len(fields)} keys; {typo!r} refused, {key!r} named")


def _law(engine: Engine, cfg: Any) -> tuple[dict[str, float], KitCheck]:
    law = engine.reference_law(cfg).law
    total = sum(law.values())
    bad = [y for y, p in law.items() if not p >= 0]
    try:
        for y in law:
            parse_outcome(y)
    except ValueError as e:
        return law, KitCheck("law", FAILED, f"an outcome badc cannot read: {e}")
    if bad or abs(total - 1) > LAW_TOL:
        return law, KitCheck("law", FAILED, f"P sums to {total!r}; negative or NaN at {bad[:3]}")
    return law, KitCheck("law", PASSED, f"P: {len(law)} outcomes, mass 1 within {LAW_TOL:g}")


def _simulator(engine: Engine, cfg: Any) -> KitCheck:
    if "Hypotheses" not in capabilities(engine):
        return KitCheck("simulator", SKIPPED, f"engine {engine.name} does not offer the Hypotheses capability")
    try:
        check = engine.simulator_check(cfg)
    except NotImplementedError as e:
        return KitCheck("simulator", SKIPPED, str(e))
    if not check.value <= SIMULATOR_TOL:
        return KitCheck("simulator", FAILED, f"{check.metric} {check.value:.3g} > {SIMULATOR_TOL:g}")
    return KitCheck("simulator", PASSED, f"{check.metric} {check.value:.3g}")


def _predicates(engine: Engine, cfg: Any, law: Mapping[str, float]) -> KitCheck:
    """Every registered predicate, built for the control, is a function of each outcome of P to a bool (or
    refuses the config with a ValueError naming it: a predicate that needs keys the control lacks)."""
    if not engine.predicates:
        return KitCheck("predicates", SKIPPED, f"engine {engine.name} registers no predicate")
    built, refused, problems = 0, [], []
    for name in engine.predicates:
        try:
            pred = engine.predicate(name, cfg)
        except ValueError as e:
            (refused if cfg.id in str(e) else problems).append(f"{name}: {e}")
            continue
        bad = [y for y in law if not isinstance(pred(y), bool)]
        if bad:
            problems.append(f"{name} gives {type(pred(bad[0])).__name__}, not bool, for {bad[0]!r}")
        built += 1
    detail = f"{built} built and evaluated on P's {len(law)} outcomes" + (f", {len(refused)} refused the config"
                                                                         if refused else "")
    return KitCheck("predicates", FAILED if problems else PASSED, "; ".join(problems) or detail)


def _arm(engine: Engine, cfg: Any, law: Mapping[str, float], trace: Path, draws: int, seed: int,
         applied: Sequence[str]) -> tuple[list[KitCheck], bool]:
    res = collect(engine, cfg, "on", draws, seed, trace_path=str(trace), applied=applied)
    c = res.contract or {}
    outside = sorted(y for y in res.outcomes if law.get(y, 0.0) == 0.0)
    problems = []
    if sum(res.outcomes.values()) != draws or c.get("requests") != draws:
        problems.append(f"{sum(res.outcomes.values())} outcomes and {c.get('requests')} requests replayed "
                        f"for {draws} draws")
    if c.get("status") != HELD:
        first = (c.get("first_violation") or {}).get("message")
        problems.append(f"contract {c.get('status')}: {first or '; '.join(c.get('left_unchecked', []))}")
    if outside:
        problems.append(f"outcomes P never gives: {outside[:3]}")
    arm = KitCheck("arm", FAILED if problems else PASSED, "; ".join(problems) or
                   f"{draws} draws traced and replayed, {c.get('calls')} calls, contract held")
    proposed, accepted = res.counters.get("proposed", 0), res.counters.get("accepted", 0)
    drafting = KitCheck("drafting", PASSED if proposed > 0 and 0 <= accepted <= proposed else FAILED,
                        f"{proposed} drafts proposed, {accepted} accepted")
    return [arm, drafting], c.get("requests", 0) > 0


def _unread(engine: Engine, trace: Path) -> KitCheck:
    blind = copy.copy(engine)
    blind.check_request = lambda records, config, context=None: []  # type: ignore[method-assign]
    res = replay_trace(str(trace), engine=blind)
    if res.status != UNCHECKED or res.partial.get(NOT_READ) != res.requests:
        return KitCheck("unread", FAILED, f"a check that reads nothing gave {res.status} ({dict(res.partial)})")
    return KitCheck("unread", PASSED, f"a check that reads nothing left all {res.requests} requests unchecked")


def _exact(engine: Engine, cfg: Any, law: Mapping[str, float], applied: Sequence[str]) -> KitCheck:
    try:
        mu = engine.speculative_law(cfg, applied)
    except ExactUnavailable as e:
        return KitCheck("exact", SKIPPED, str(e))
    distance = tv(mu.law, law)
    ok = distance <= EXACT_TOL and mu.proposed > 0 and abs(sum(mu.law.values()) - 1) <= LAW_TOL
    return KitCheck("exact", PASSED if ok else FAILED,
                    f"TV(mu, P) {distance:.3g} (tol {EXACT_TOL:g}), {mu.paths} paths, {mu.proposed} drafts proposed")


def conformance(engine: Engine, control: Mapping[str, Any], folder: Path | str, *, draws: int = 30,
                seed: int = 1, exact: bool = True, applied: Sequence[str] = ()) -> Conformance:
    """Every check of the kit on `control` (a campaign `[[config]]` of a plain negative control, badc's own
    keys left out), traces written under `folder`; `exact=False` leaves the exact channel out (skipped);
    `applied`: frozen repairs taken as part of the build (the arm and the exact channel get them)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg, config_check = _config(engine, control)
    law, law_check = _law(engine, cfg)
    checks = [config_check, law_check, _simulator(engine, cfg), _predicates(engine, cfg, law)]
    trace = folder / f"kit-{cfg.id}-on.badc"
    arm_checks, replayed = _arm(engine, cfg, law, trace, draws, seed, applied)
    checks += arm_checks
    checks.append(_unread(engine, trace) if replayed else KitCheck("unread", FAILED, "the arm replayed no request"))
    checks.append(_exact(engine, cfg, law, applied) if exact else KitCheck("exact", SKIPPED, "not asked (exact=False)"))
    return Conformance(engine.name, cfg.id, tuple(checks), tuple(capabilities(engine)))


def check_engine(engine: Engine, control: Mapping[str, Any], folder: Path | str, **kwargs: Any) -> Conformance:
    """`conformance`, raising one AssertionError that lists every failed check (for a pytest test)."""
    result = conformance(engine, control, folder, **kwargs)
    if result.failed:
        raise AssertionError(f"engine {engine.name}, config {result.config}: the conformance kit failed\n"
                             + result.summary())
    return result
