"""Reading COUNTS.json (docs/interfaces.md, "Outcomes and counts") with errors that name the bad field."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from badc_check.channels import RecordArm
from badc_check.decide import Arm, Config
from badc_replay.validation import nearest
from badc_trace.outcomes import OutcomeError, parse_outcome

RECORD_STATUSES = ("complete", "incomplete", "not_returned")
CONFIG_KEYS = ("id", "engine", "build", "role", "on", "off", "reference", "predicates", "exercise", "violations",
               "hypothesis", "records", "support")
ROLES = ("probe", "negative-control", "positive-control")
MAX_COUNT = 2**53  # counts stay exact as floats (the bounds compute in floating point)


class CountsError(ValueError):
    def __init__(self, path: str, where: str, message: str):
        self.path, self.where = path, where
        super().__init__(f"{path}: {where}: {message}")


class _Reader:
    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, message: str) -> CountsError:
        return CountsError(self.path, where, message)

    def obj(self, v: Any, where: str) -> dict:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, got {type(v).__name__}")
        return v

    def keys(self, v: dict, where: str, valid: tuple[str, ...]) -> dict:
        """Refuse an unknown or misspelled key, naming the nearest valid one."""
        for key in v:
            if key not in valid:
                raise self.fail(f"{where}.{key}" if where != "top level" else key,
                                f"unknown key {key!r} ({nearest(key, valid)})")
        return v

    def int(self, v: Any, where: str) -> int:
        if type(v) is not int or not 0 <= v <= MAX_COUNT:
            shown = repr(v) if len(repr(v)) <= 40 else f"{repr(v)[:37]}..."
            raise self.fail(where, f"expected an integer from 0 to 2**53, got {shown}")
        return v

    def prob(self, v: Any, where: str, *, positive: bool = False) -> float:
        if type(v) not in (int, float) or not math.isfinite(v) or not 0 <= v <= 1 or (positive and v <= 0):
            raise self.fail(where, f"expected a probability in {'(0' if positive else '[0'}, 1], got {v!r}")
        return float(v)

    def outcome(self, y: Any, where: str) -> str:
        try:
            parse_outcome(y)
        except OutcomeError as e:
            raise self.fail(where, str(e)) from None
        return y

    def counts(self, v: Any, where: str) -> dict[str, int]:
        return {self.outcome(y, f"{where}[{y!r}]"): self.int(k, f"{where}[{y!r}]")
                for y, k in self.obj(v, where).items()}

    def law(self, v: Any, where: str) -> dict[str, float]:
        law = {self.outcome(y, f"{where}[{y!r}]"): self.prob(p, f"{where}[{y!r}]")
               for y, p in self.obj(v, where).items()}
        total = sum(law.values())
        if abs(total - 1) > 1e-6:
            raise self.fail(where, f"probabilities sum to {total:.9f}, not 1")
        return law

    def records(self, v: Any, where: str) -> RecordArm:
        v = self.keys(self.obj(v, where), where, ("draws", "mismatch", "positions"))
        draws = self.int(v.get("draws"), f"{where}.draws")
        mismatch = self.int(v.get("mismatch"), f"{where}.mismatch")
        positions = {}
        for p, k in self.obj(v.get("positions", {}), f"{where}.positions").items():
            if not re.fullmatch(r"[1-9][0-9]{0,9}", p, re.ASCII):
                raise self.fail(f"{where}.positions[{p!r}]", "positions are keyed by integers")
            positions[int(p)] = self.int(k, f"{where}.positions[{p!r}]")
        if mismatch > draws:
            raise self.fail(f"{where}.mismatch", f"{mismatch} mismatches in {draws} draws")
        over = {p: k for p, k in positions.items() if k > mismatch}
        if over:
            p, k = next(iter(over.items()))
            raise self.fail(f"{where}.positions[{str(p)!r}]", f"{k} draws mismatch at position {p}, but only "
                                                              f"{mismatch} draws mismatch at all")
        return RecordArm(draws, mismatch, positions)

    def config(self, c: Any, where: str) -> Config:
        c = self.keys(self.obj(c, where), where, CONFIG_KEYS)
        cid = c.get("id")
        if not isinstance(cid, str) or not cid:
            raise self.fail(f"{where}.id", "expected a non-empty string")
        for arm in ("on", "off"):
            if arm not in c:
                raise self.fail(where, f"missing field {arm!r} (outcome counts of the arm)")
        on, off = self.counts(c["on"], f"{where}.on"), self.counts(c["off"], f"{where}.off")
        reference = self.law(c["reference"], f"{where}.reference") if c.get("reference") is not None else None
        predicates = {}
        for name, ys in self.obj(c.get("predicates", {}), f"{where}.predicates").items():
            if not isinstance(ys, list):
                raise self.fail(f"{where}.predicates[{name!r}]", "expected a list of violating outcomes")
            predicates[name] = frozenset(self.outcome(y, f"{where}.predicates[{name!r}]") for y in ys)
        n_on, n_off = sum(on.values()), sum(off.values())
        ex = self.keys(self.obj(c.get("exercise", {}), f"{where}.exercise"), f"{where}.exercise",
                       ("proposed", "accepted"))
        proposed = self.int(ex["proposed"], f"{where}.exercise.proposed") if "proposed" in ex else None
        accepted = self.int(ex["accepted"], f"{where}.exercise.accepted") if "accepted" in ex else None
        if proposed is not None and accepted is not None and accepted > proposed:
            raise self.fail(f"{where}.exercise.accepted", f"{accepted} draft tokens accepted of {proposed} proposed")
        vio = self.keys(self.obj(c.get("violations", {}), f"{where}.violations"), f"{where}.violations", ("on", "off"))
        v_on = self.int(vio.get("on", 0), f"{where}.violations.on")
        v_off = self.int(vio.get("off", 0), f"{where}.violations.off")
        for arm, v, n in (("on", v_on, n_on), ("off", v_off, n_off)):
            if v > n:
                raise self.fail(f"{where}.violations.{arm}", f"{v} violating draws in an arm of {n} draws")
        # Trace replay is the contract channel, beside the decision; without it the channel is unchecked.
        contract = None if "violations" not in c else {
            "status": "broken" if v_on else "held", "requests": n_on, "violating_requests": v_on,
            "off": {"status": "broken" if v_off else "held", "requests": n_off, "violating_requests": v_off}}
        hyp = None
        if c.get("hypothesis") is not None:
            h = self.keys(self.obj(c["hypothesis"], f"{where}.hypothesis"), f"{where}.hypothesis", ("id", "law"))
            if not isinstance(h.get("id"), str):
                raise self.fail(f"{where}.hypothesis.id", "expected a string")
            hyp = (h["id"], self.law(h.get("law"), f"{where}.hypothesis.law"))
        rec = self.keys(self.obj(c.get("records", {}), f"{where}.records"), f"{where}.records",
                        ("status", "on", "off"))
        status = rec.get("status", "not_returned")
        if status not in RECORD_STATUSES:
            raise self.fail(f"{where}.records.status", f"expected one of {', '.join(RECORD_STATUSES)}")
        r_on = self.records(rec["on"], f"{where}.records.on") if "on" in rec else None
        r_off = self.records(rec["off"], f"{where}.records.off") if "off" in rec else None
        if status == "complete" and (r_on is None or r_off is None):
            raise self.fail(f"{where}.records", "status 'complete' needs 'on' and 'off' record counts")
        support = None
        if c.get("support") is not None:
            if not isinstance(c["support"], list):
                raise self.fail(f"{where}.support", "expected a list of outcomes")
            support = tuple(self.outcome(y, f"{where}.support") for y in c["support"])
        role = c.get("role", "probe")
        if role not in ROLES:
            raise self.fail(f"{where}.role", f"expected one of {', '.join(ROLES)}")
        for arm, r, n in (("on", r_on, n_on), ("off", r_off, n_off)):
            if r is not None and r.draws > n:
                raise self.fail(f"{where}.records.{arm}.draws", f"{r.draws} draws with records in an arm of {n} draws")
        return Config(id=cid, on=Arm(on, v_on, proposed, accepted), off=Arm(off, v_off), reference=reference,
                      predicates=predicates, hypothesis=hyp, records_status=status, records_on=r_on,
                      records_off=r_off, declared_support=support,
                      engine=self.text(c.get("engine", ""), f"{where}.engine"),
                      build=self.text(c.get("build", ""), f"{where}.build"), role=role, contract=contract)

    def text(self, v: Any, where: str) -> str:
        if not isinstance(v, str):
            raise self.fail(where, f"expected a string, got {type(v).__name__}")
        return v


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def load_counts(path: str | Path) -> tuple[dict[str, Any], list[Config]]:
    """(settings {alpha, threshold, m}, configs) from a COUNTS.json file."""
    path = str(path)
    r = _Reader(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f, object_pairs_hook=_unique_keys)
    except FileNotFoundError:
        raise CountsError(path, "file", "not found") from None
    except IsADirectoryError:
        raise CountsError(path, "file", "is a folder, not a counts file") from None
    except OSError as e:
        raise CountsError(path, "file", f"cannot be read: {e.strerror or e}") from None
    except _DuplicateKey as e:
        raise CountsError(path, "file", f"key {e.key!r} appears twice in one object (JSON would keep the last "
                                        "silently)") from None
    except json.JSONDecodeError as e:
        raise CountsError(path, f"line {e.lineno} column {e.colno}", f"not valid JSON: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise CountsError(path, f"byte {e.start}", "not UTF-8 text") from None
    except RecursionError:
        raise CountsError(path, "file", "nested too deeply to be a counts file") from None
    except ValueError as e:  # an integer of thousands of digits (Python's int limit)
        raise CountsError(path, "file", f"not a counts file: {e}") from None
    doc = r.keys(r.obj(doc, "top level"), "top level", ("alpha", "threshold", "m", "configs"))
    alpha = r.prob(doc.get("alpha", 0.05), "alpha", positive=True)
    threshold = r.prob(doc.get("threshold", 0.01), "threshold")
    configs_raw = doc.get("configs")
    if not isinstance(configs_raw, list) or not configs_raw:
        raise r.fail("configs", "expected a non-empty list of configurations")
    configs = [r.config(c, f"configs[{i}]") for i, c in enumerate(configs_raw)]
    ids = [c.id for c in configs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise r.fail("configs", f"duplicate ids: {', '.join(dup)}")
    m = doc.get("m", len(configs))
    if type(m) is not int or m < len(configs):
        raise r.fail("m", f"expected an integer >= the number of configs ({len(configs)}), got {m!r}")
    return {"alpha": alpha, "threshold": threshold, "m": m}, configs
