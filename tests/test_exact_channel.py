"""The exact channel on the toy engine: mu of the live speculation-on engine against P, its statuses, the
exit codes of `badc run --exact-only`, the plan, the seal, and a planted randomness defect localized by
testing the sampled on-arm against mu itself. Known truths: the toy's planted defects (a defect makes mu
differ, the repair brings it back to P exactly), a config whose drafter can propose nothing."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from badc_check.campaign import CampaignError, load_campaign, run_campaign
from badc_check.decide import event_family
from badc_check.exact import exact_report, planned_draws, tv
from badc_replay.exact import (
    DIFFERS,
    EQUAL_WITHIN_TOL,
    EXACT_TOL,
    NOT_ENUMERABLE,
    UNEXERCISED,
    UNSUPPORTED,
    ExactUnavailable,
)
from badc_replay.worker import exact
from badc_toy.replay import ENGINE

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = """
[campaign]
name = "toy-exact"
draws = {draws}
seed = 3
{extra}

[[config]]
id = "T-N"
engine = "toy"
build = "0.1.0"
role = "negative-control"

[[config]]
id = "T-D1"
engine = "toy"
build = "0.1.0"
processors = [{{ name = "min_tokens", min_tokens = 3 }}]
defects = ["D1"]
predicates = ["min_tokens"]
hypothesis = "H-D1"
repair = "toy/logical-rows"
"""


def write(tmp_path: Path, draws: int = 1000, extra: str = "", more: str = "") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.format(draws=draws, extra=extra) + more)
    return path


def config(**kw):
    return {"id": "T", "engine": "toy", "build": "0.1.0", **kw}


def test_mu_is_p_without_a_defect_and_differs_with_each_read_defect(tmp_path):
    p = ENGINE.reference_law(ENGINE.parse_config(config())).law
    mu = ENGINE.speculative_law(ENGINE.parse_config(config()))
    assert tv(mu.law, p) < 1e-15 and mu.proposed > 0 and abs(sum(mu.law.values()) - 1) < 1e-12
    for defect, procs, stops in (("D1", [{"name": "min_tokens", "min_tokens": 3}], []),
                                 ("D2", [{"name": "no_repeat"}], []),
                                 ("D3", [], [{"name": "last_id", "token": 2}])):
        c = ENGINE.parse_config(config(defects=[defect], processors=procs, stopping=stops))
        p = ENGINE.reference_law(c).law
        mu = ENGINE.speculative_law(c).law
        assert tv(mu, p) > 0.01, defect
        # the live engine's mu is the defect's hypothesis law, and the repair brings it back to P exactly
        assert tv(mu, ENGINE.hypothesis_law(c, f"H-{defect}").law) < 1e-15
        assert tv(ENGINE.speculative_law(c, ["toy/logical-rows"]).law, p) < 1e-15


def test_report_fields_from_the_worker(tmp_path):
    c = config(id="T-D1", processors=[{"name": "min_tokens", "min_tokens": 3}], defects=["D1"],
               predicates=["min_tokens"], hypothesis="H-D1", repair="toy/logical-rows")
    res = exact(c, tmp_path)
    assert (tmp_path / "exact" / "T-D1.json").exists() and res["proposed"] > 0
    cfg = ENGINE.parse_config(c)
    r = exact_report(c, res, tol=EXACT_TOL, threshold=0.01, alpha=0.05, m=1,
                     predicates={"min_tokens": ENGINE.predicate("min_tokens", cfg)})
    assert r.status == DIFFERS and r.material
    # every outcome of mu that P never reaches is an EOS before min_tokens: structural and witness mass agree
    assert r.structural_mass == r.witness_mass == pytest.approx(r.tv, abs=1e-12) and r.tv > 0.1
    assert r.events[0].P == 0 and r.events[0].mu == pytest.approx(r.tv)
    assert r.hypotheses["H-D1"] < 1e-15 and r.hypotheses["H-D2"] > 0.1
    assert r.repair < 1e-15
    assert isinstance(r.plan, int) and 10 < r.plan < 1000
    d = r.to_dict()
    assert d["events"][0]["difference"] == pytest.approx(r.tv) and "under scripted randomness" in d["note"]


def test_unexercised_not_enumerable_and_unsupported_are_said(tmp_path):
    r = exact(config(id="T-1", max_new_tokens=1), tmp_path)
    rep = exact_report(config(id="T-1"), r, tol=EXACT_TOL, threshold=0.01, alpha=0.05, m=1)
    assert rep.status == UNEXERCISED and rep.tv == 0 and rep.proposed == 0 and "no enumerated path" in rep.reason
    with pytest.raises(ValueError, match="NOT_ENUMERABLE or UNSUPPORTED"):
        ExactUnavailable(DIFFERS, "not an unavailable status")
    res = {"status": NOT_ENUMERABLE, "reason": "model 'smollm2' is not an embedded tiny model"}
    rep = exact_report(config(), res, tol=EXACT_TOL, threshold=0.01, alpha=0.05, m=1)
    assert rep.status == NOT_ENUMERABLE and rep.tv is None and rep.material is None
    # an unsound pruning rule is never reported as a law
    unsound = {**exact(config(id="T-2"), tmp_path), "soundness": {"leaves": 10, "mismatches": 2, "rule": "r"}}
    rep = exact_report(config(), unsound, tol=EXACT_TOL, threshold=0.01, alpha=0.05, m=1)
    assert rep.status == UNSUPPORTED and rep.tv is None and "unsound" in rep.reason


def test_the_plan_needs_more_draws_for_a_smaller_difference():
    p = {"0|eos": 0.5, "1|eos": 0.5}
    fam = event_family(p, None, {})
    big = planned_draws(fam, {"0|eos": 0.6, "1|eos": 0.4}, p, threshold=0.01, alpha=0.05, m=1, predicates={})
    small = planned_draws(fam, {"0|eos": 0.53, "1|eos": 0.47}, p, threshold=0.01, alpha=0.05, m=1, predicates={})
    assert isinstance(big, int) and isinstance(small, int) and 100 <= big < small
    # below the threshold D > threshold is unreachable: the plan says so instead of a number
    tiny = planned_draws(fam, {"0|eos": 0.502, "1|eos": 0.498}, p, threshold=0.01, alpha=0.05, m=1, predicates={})
    assert isinstance(tiny, str) and tiny.startswith("more than")


def test_under_anytime_the_plan_uses_the_last_looks_share_of_the_tail():
    """--anytime decides at looks; the last one, from 2,000 draws on, has half the tail. The plan is
    computed at that look's bounds (earlier looks only add power), so it is the fixed-n plan at alpha / 2."""
    p = {"0|eos": 0.5, "1|eos": 0.5}
    fam = event_family(p, None, {})
    mu = {"0|eos": 0.53, "1|eos": 0.47}
    fixed = planned_draws(fam, mu, p, threshold=0.01, alpha=0.05, m=1, predicates={})
    anytime = planned_draws(fam, mu, p, threshold=0.01, alpha=0.05, m=1, predicates={}, anytime=True)
    half = planned_draws(fam, mu, p, threshold=0.01, alpha=0.025, m=1, predicates={})
    assert 2000 <= fixed < anytime == half


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "badc_check.cli", "run", *args], capture_output=True, text=True,
                          cwd=ROOT)


def test_exact_only_exit_codes(tmp_path):
    r = run_cli(str(write(tmp_path)), "--exact-only", "--out", str(tmp_path / "o1"))
    assert r.returncode == 1, r.stderr
    assert "T-D1: exact channel DIFFERS" in r.stderr and "| T-N |" in r.stdout and "EQUAL_WITHIN_TOL" in r.stdout
    assert "T-N: exact channel computed in " in r.stderr  # shown as each config is done
    report = json.loads((tmp_path / "o1" / "report.json").read_text())
    assert [c["exact"]["status"] for c in report["configs"]] == [EQUAL_WITHIN_TOL, DIFFERS]
    assert all(c["decision"] is None for c in report["configs"])
    assert not (tmp_path / "o1" / "shards").exists()  # no decision draws
    # where mu differs, the campaign's first on-arm draws are traced and replayed: the first violation
    control, d1 = (c["exact"] for c in report["configs"])
    assert control["witness"] is None
    w = d1["witness"]
    assert w["trace"] == "exact/T-D1.badc" and (tmp_path / "o1" / w["trace"]).is_file()
    assert w["draws"] == max(200, math.ceil(3 / d1["tv"])) and w["violations"] > 0
    first = w["contract"]["first_violation"]
    assert first["kind"] == "D1" and f"first contract violation (the first {w['draws']:,} on-arm draws" in r.stdout
    replay = subprocess.run([sys.executable, "-m", "badc_check.cli", "replay", str(tmp_path / "o1" / w["trace"])],
                            capture_output=True, text=True, cwd=ROOT)
    assert replay.returncode == 1 and first["message"] in replay.stdout  # the same finding, from the trace alone
    # the control alone: 0; a config whose drafter proposes nothing: 3
    only_n = tmp_path / "n.toml"
    only_n.write_text(CAMPAIGN.format(draws=100, extra="exact = \"only\"").split("[[config]]\nid = \"T-D1\"")[0])
    assert run_cli(str(only_n), "--out", str(tmp_path / "o2")).returncode == 0
    one = only_n.read_text() + '\n[[config]]\nid = "T-1"\nengine = "toy"\nbuild = "0.1.0"\nmax_new_tokens = 1\n'
    only_n.write_text(one)
    r = run_cli(str(only_n), "--out", str(tmp_path / "o3"))
    assert r.returncode == 3 and "T-1: exact channel UNEXERCISED" in r.stderr


def test_plan_writes_planned_draws(tmp_path):
    r = run_cli(str(write(tmp_path)), "--plan", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert plan["T-N"]["draws"] is None and plan["T-N"]["status"] == EQUAL_WITHIN_TOL
    assert isinstance(plan["T-D1"]["draws"], int) and "T-D1:" in r.stdout


def test_exact_beside_the_draws_and_its_own_seal(tmp_path):
    out = tmp_path / "o"
    report = run_campaign(load_campaign(write(tmp_path, draws=500)), out, executor="inline", log=lambda m: None,
                          plots=False)
    assert "exact" not in report["configs"][0]
    # added to the sealed folder later: the decisions' seal is unchanged, the channel gets its own
    report = run_campaign(load_campaign(write(tmp_path, draws=500), exact="on"), out, executor="inline",
                          log=lambda m: None, plots=False)
    assert [c["exact"]["status"] for c in report["configs"]] == [EQUAL_WITHIN_TOL, DIFFERS]
    assert [c["decision"] for c in report["configs"]] == ["NOT_REJECTED", "FAILS"]
    assert "exact" in json.loads((out / "seal.json").read_text())
    md = (out / "report.md").read_text()
    assert "| contract | exact |" in md and "exact channel DIFFERS: TV(mu, P)" in md
    with pytest.raises(CampaignError, match="exact channel tolerance"):
        run_campaign(load_campaign(write(tmp_path, draws=500, extra="exact = \"on\"\nexact_tol = 0.001")), out,
                     executor="inline", log=lambda m: None, plots=False)


def test_a_planted_randomness_defect_is_localized_by_the_sampled_arm_against_mu(tmp_path):
    # R1: the on arm's sampler reuses each uniform for two draws. The engine's reads are right, so mu (its
    # scripted law) equals P; the sampled arms differ (FAILS), and the sampled on-arm departs from mu itself:
    # the defect is in the randomness, not in the composition.
    more = '\n[[config]]\nid = "T-R1"\nengine = "toy"\nbuild = "0.1.0"\ndefects = ["R1"]\n'
    report = run_campaign(load_campaign(write(tmp_path, draws=2000, more=more), exact="on"), tmp_path / "o",
                          executor="inline", log=lambda m: None, plots=False)
    by = {c["id"]: c for c in report["configs"]}
    r1 = by["T-R1"]
    assert r1["exact"]["status"] == EQUAL_WITHIN_TOL and r1["decision"] == "FAILS"
    assert r1["exact"]["sampled_against_mu"]["rejected"] is True
    # the read defect D1 and the control: the sampled arm agrees with mu (the composition is what differs)
    assert by["T-D1"]["exact"]["sampled_against_mu"]["rejected"] is False
    assert by["T-N"]["exact"]["sampled_against_mu"]["rejected"] is False


def test_a_witness_says_what_it_did_not_check():
    from badc_check.exact import witness_line

    w = {"draws": 200, "trace": "exact/X.badc", "violations": 0, "error": None}
    assert witness_line({**w, "contract": None}).startswith("witness trace NOT REPLAYED")
    assert witness_line({**w, "contract": None, "error": "RuntimeError: x"}).startswith("witness trace MISSING")
    line = witness_line({**w, "contract": {"first_violation": None, "left_unchecked": ["torn tail at 12"]}})
    assert line.startswith("no contract violation in the first 200") and "left unchecked: torn tail at 12" in line


def test_exact_only_in_the_pytest_plugin(tmp_path):
    from badc_check.pytest_plugin import BadcFixture

    fixture = BadcFixture(tmp_path)
    with pytest.raises(pytest.fail.Exception) as e:
        fixture.run(write(tmp_path), exact_only=True)
    msg = str(e.value)
    assert "T-D1" in msg and "exact channel DIFFERS" in msg and "exact event" in msg and "T-N" not in msg
    assert "first contract violation" in msg and "D1: at logical prefix" in msg


def test_batched_enumeration_gives_the_same_law_as_depth_first():
    # the breadth-first enumerator an engine that runs many requests per call uses (vLLM): each request
    # follows its script and keeps the law it branched on, never interrupted; a planted program with a
    # stop inside and uneven laws gives the same law both ways, and the leaves' probabilities are kept
    from badc_replay.enumeration import Follow, enumerate_batched, enumerate_law

    laws = [np.array([0.5, 0.25, 0.25]), np.array([0.1, 0.0, 0.9])]

    def program(choose):
        out = []
        for step in range(3):
            y = choose(laws[len(out) % 2])
            out.append(y)
            if y == 2 and step:
                break
        return " ".join(map(str, out))

    def run_batch(scripts):
        results = []
        for s in scripts:
            follow = Follow(s)
            y = program(follow.choose)
            results.append(follow.branch if follow.branch is not None else y)
        return results

    deep = enumerate_law(program)
    wide = enumerate_batched(run_batch, batch=4, keep_leaves=True)
    assert wide.law.keys() == deep.law.keys() and all(abs(wide.law[y] - deep.law[y]) < 1e-15 for y in deep.law)
    assert abs(sum(wide.law.values()) - 1) < 1e-12 and len(wide.leaves) == len(deep.law)
    one = Follow(wide.leaves[0][0])
    program(one.choose)
    assert one.branch is None and abs(one.prob - deep.law[wide.leaves[0][1]]) < 1e-15
