"""tools/rq3.py: the generated RQ3 campaigns validate with m = 11 and one confirmation per cause,
stratum and cell; its analysis counts a recovered cause per cell from known reports, and never counts a
cell whose selected config has no confirmation result."""

import importlib.util
import json
from pathlib import Path

import pytest

from badc_check.campaign import load_campaign
from badc_check.selection import confirmation_m

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rq3", ROOT / "tools" / "rq3.py")
rq3 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rq3)


def test_the_committed_campaigns_are_the_generators_and_validate(tmp_path, monkeypatch):
    monkeypatch.setattr(rq3, "CAMPAIGNS", tmp_path)
    rq3.write(10)
    for path in sorted(tmp_path.glob("*.toml")):
        assert path.read_text() == (ROOT / "campaigns" / "rq3" / path.name).read_text()  # regenerated alike
        c = load_campaign(path)
        assert c.m == 11 and confirmation_m(c.configs) == 4 and c.confirm_m == 8  # 2 causes x 2 strata x 2 cells
        strata = {x["id"]: x.get("stratum") for x in c.configs}
        assert sum(s == "directed" for s in strata.values()) == sum(s == "random" for s in strata.values()) == 4


def _config(cid, decision="FAILS", without="FAILS", confirmed=None, attempted=True):
    return {"id": cid, "decision": decision, "eligible": decision == "FAILS", "calibration": {"passed": True},
            "hypothesis": {"compatible": True},
            "without_hypothesis_events": {"decision": without, "eligible": without == "FAILS"},
            "repair": None if confirmed is None and attempted else
            {"id": "x", "attempted": attempted, "confirmed": bool(confirmed)}}


def test_recovered_causes_per_cell():
    report = {"campaign": "rq3-1", "configs": [
        # stateful processors, directed: guidance detected only through A_H and confirmed; without A_H the cell
        # falls to SynthID, whose confirmation was not run: undetermined, never counted
        _config("RQ3-1-GUIDANCE-D", without="NOT_REJECTED", confirmed=True),
        _config("RQ3-1-SYNTHID-D", attempted=False),
        # random: guidance not detected, SynthID confirmed in both cells
        _config("RQ3-1-GUIDANCE-R", decision="NOT_REJECTED", without="NOT_REJECTED"),
        _config("RQ3-1-SYNTHID-R", confirmed=True),
        # processor buffer: min_tokens detected and its repair not confirmed (directed); nothing detected (random)
        _config("RQ3-1-MIN_TOKENS-D", confirmed=False), _config("RQ3-1-PARITY-D", attempted=False),
        _config("RQ3-1-MIN_TOKENS-R", decision="NOT_REJECTED", without="NOT_REJECTED"),
        _config("RQ3-1-PARITY-R", decision="NOT_REJECTED", without="NOT_REJECTED"),
    ]}
    cause = "transformers/stateful-replay"
    assert rq3.cell(report, "directed", cause, without=False) == "yes"
    assert rq3.cell(report, "directed", cause, without=True) == "undetermined"
    assert rq3.cell(report, "random", cause, without=False) == rq3.cell(report, "random", cause, True) == "yes"
    assert rq3.cell(report, "directed", "llama_cpp/logical-prefix", without=False) == "no"
    assert rq3.cell(report, "random", "llama_cpp/logical-prefix", without=False) == "no"
    # the exact bound on P(d_A != 0): the paper's 0.26-0.39, from 0 or 1 nonzero of 10 campaigns
    assert (round(rq3.cp_upper(0, 10), 2), round(rq3.cp_upper(1, 10), 2)) == (0.26, 0.39)


def test_a_confirmation_size_that_cannot_confirm_is_refused_before_anything_runs(tmp_path, monkeypatch):
    # at m = 8 the witness bound alone needs 71,543 draws: with fewer every cell would read "no" for nothing
    ran = []
    monkeypatch.setattr(rq3.subprocess, "run", lambda *a, **k: ran.append(a))
    with pytest.raises(SystemExit, match="--confirm 71,542 cannot confirm any repair .* at least 71,543 can"):
        rq3.run(1, 20000, 71542, 2, tmp_path)
    assert ran == [] and not (tmp_path / "campaign-1").exists()
    monkeypatch.setattr(rq3.subprocess, "run", lambda *a, **k: ran.append(a) or type("P", (), {"returncode": 0}))
    assert rq3.run(1, 20000, 71543, 2, tmp_path) == 0 and len(ran) == 1


def test_analyze_gives_table_5_with_the_exact_bounds_of_d_a_and_d_b(tmp_path):
    # two campaigns: in the first every cell recovers both causes (d_A = d_B = 0); in the second the random
    # stratum loses the stateful-processor cause with A_H (d_A = 1) and its directed without-A_H cell is
    # undetermined (no d_B there); bounds are exact (Clopper-Pearson) over the campaigns where determined
    full = [_config(f"RQ3-K-{f}-{s}", confirmed=True) for f in ("GUIDANCE", "MIN_TOKENS") for s in "DR"]
    second = [_config("RQ3-K-GUIDANCE-D", without="NOT_REJECTED", confirmed=True),
              _config("RQ3-K-SYNTHID-D", attempted=False),
              _config("RQ3-K-GUIDANCE-R", confirmed=False), _config("RQ3-K-MIN_TOKENS-D", confirmed=True),
              _config("RQ3-K-MIN_TOKENS-R", confirmed=True)]
    for k, configs in ((1, full), (2, second)):
        folder = tmp_path / f"campaign-{k}"
        folder.mkdir()
        rows = [{**c, "id": c["id"].replace("-K-", f"-{k}-")} for c in configs]
        (folder / "report.json").write_text(json.dumps({"campaign": f"rq3-{k}", "configs": rows}))
    shard = tmp_path / "campaign-1" / "shards" / "RQ3-1-GUIDANCE-D"
    shard.mkdir(parents=True)
    (shard / "on-0.json").write_text(json.dumps({"elapsed_s": 7200.0, "cpu_s": 5400.0}))
    (shard / "off-0.json").write_text(json.dumps({"elapsed_s": 3600.0}))  # before CPU time was recorded
    text = rq3.analyze(tmp_path)
    assert "| rq3-1 | yes, yes | yes, yes | yes, yes | yes, yes | elapsed 3.0, CPU 1.5 (1 of 2 shards) |" in text
    assert "| rq3-2 | yes, yes | undetermined, yes | no, yes | no, yes | - |" in text
    assert (f"d_A (directed - random recovered causes, with A_H): determined in 2 of 2, nonzero in 1; exact 95% "
            f"upper bound on P(d_A != 0): {rq3.cp_upper(1, 2):.2f}") in text
    assert (f"d_B (directed: with - without A_H): determined in 1 of 2, nonzero in 0; exact 95% upper bound on "
            f"P(d_B != 0): {rq3.cp_upper(0, 1):.2f}") in text
    assert f"d_B (random: with - without A_H): determined in 2 of 2, nonzero in 0; exact 95% upper bound on " \
           f"P(d_B != 0): {rq3.cp_upper(0, 2):.2f}" in text
    with pytest.raises(SystemExit, match="no finished campaign"):
        rq3.analyze(tmp_path / "none")
    # a report that lists pending configs is refused, never read as causes not recovered
    (tmp_path / "campaign-2" / "report.json").write_text(json.dumps(
        {"campaign": "rq3-2", "configs": second[:1], "pending": [{"id": "RQ3-2-GUIDANCE-R"}]}))
    with pytest.raises(SystemExit, match=r"campaign-2/report.json: 1 configs are pending .*`tools/rq3.py run 2`"):
        rq3.analyze(tmp_path)
