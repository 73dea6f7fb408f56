"""Stage S3's selection: one attempt per cause and build, by sealed priority, for eligible, calibrated,
compatible failures only; a VOID config bars its build. And the campaign file's study-wide m."""

import numpy as np
import pytest

from badc_check.campaign import CampaignError, load_campaign
from badc_check.decide import INCONCLUSIVE, Arm, Config, decide
from badc_check.selection import confirmation_m, select_confirmations
from tests.lawgen import random_law, sample, shifted_law

P = random_law(11)
MU = shifted_law(P, 0.1, seed=1)


def _decision(kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = 20000
    on_law, off_law, hyp = {"fails": (MU, P, MU), "wrong-hypothesis": (MU, P, shifted_law(P, 0.1, seed=2)),
                            "not-rejected": (P, P, None), "void": (P, MU, None)}[kind]
    cfg = Config(kind, Arm(sample(on_law, n, rng), proposed=100), Arm(sample(off_law, n, rng)), reference=P,
                 hypothesis=None if hyp is None else ("H", hyp))
    return decide(cfg)


def _cfg(cid, build="1", repair="fix", **kw):
    return {"id": cid, "engine": "e", "build": build, **({"repair": repair} if repair else {}), **kw}


def test_one_attempt_per_cause_and_build_chosen_by_priority_among_qualifying_failures():
    configs = [_cfg("A"), _cfg("B", priority=0), _cfg("C", build="2"), _cfg("D", build="2", repair="other"),
               _cfg("E", build="2")]
    d = {"A": _decision("fails"), "B": _decision("fails", 1), "C": _decision("wrong-hypothesis"),
         "D": _decision("fails", 2), "E": _decision("fails", 3)}
    assert d["A"].decision == "FAILS" and d["A"].eligible and d["A"].hypothesis.compatible
    assert not d["C"].hypothesis.compatible
    sel = select_confirmations(configs, d)
    # B outranks A (priority 0 before roster order); on build 2, C is incompatible, so E confirms "fix"
    # and D its own cause.
    assert sel.attempts == ("B", "D", "E") and sel.pending == ()
    assert "attempted through B" in sel.not_attempted["A"]
    assert "incompatible with its hypothesis H" in sel.not_attempted["C"]
    assert confirmation_m(configs) == 3  # (fix, 1), (fix, 2), (other, 2): fixed at the seal


def test_a_void_config_bars_its_build_and_undecided_builds_wait():
    configs = [_cfg("A"), _cfg("N", repair=None), _cfg("B", build="2"), _cfg("M", build="2", repair=None)]
    d = {"A": _decision("fails"), "N": _decision("void"), "B": _decision("fails", 1), "M": None}
    assert d["N"].decision == "VOID"
    sel = select_confirmations(configs, d)
    assert sel.attempts == () and "N is VOID" in sel.not_attempted["A"] and sel.pending == ("B",)
    d["M"] = INCONCLUSIVE  # its jobs failed: decided, not VOID
    assert select_confirmations(configs, d).attempts == ("B",)
    d["B"] = _decision("not-rejected")
    assert "decision NOT_REJECTED" in select_confirmations(configs, d).not_attempted["B"]


def test_campaign_includes_other_files_and_names_the_studys_m(tmp_path):
    (tmp_path / "a.toml").write_text('[defaults]\nengine = "llama_cpp"\nbuild = "0.3.19"\n'
                                     '[[config]]\nid = "LCP-1-19"\n')
    (tmp_path / "b.toml").write_text('[defaults]\nengine = "transformers"\nbuild = "5.17.0"\n'
                                     '[[config]]\nid = "HF17-6"\npriority = 1\n')
    study = tmp_path / "study.toml"
    study.write_text('[campaign]\nname = "s"\nm = 26\ninclude = ["a.toml", "b.toml"]\n')
    c = load_campaign(study)
    assert [x["id"] for x in c.configs] == ["LCP-1-19", "HF17-6"] and c.m == 26
    assert c.configs[0]["build"] == "0.3.19" and c.configs[1]["engine"] == "transformers"
    assert load_campaign(tmp_path / "a.toml").m == 1  # the roster itself by default
    study.write_text(study.read_text().replace("m = 26", "m = 27"))
    assert load_campaign(study).seal()["parts"]["settings"] != c.seal()["parts"]["settings"]  # m is sealed
    study.write_text(study.read_text().replace("m = 27\n", ""))
    assert load_campaign(study).m == 2


@pytest.mark.parametrize("text, message", [
    ('[campaign]\nm = 1\ninclude = ["a.toml", "b.toml"]\n', "m must be an integer >= the 2 configs"),
    ('[campaign]\ninclude = ["a.toml", "a.toml"]\n', "duplicate config ids: LCP-1-19"),
    ('[campaign]\ninclude = ["nope.toml"]\n', "nope.toml: not found"),
    ('[campaign]\ninclude = ["study.toml"]\n', "includes itself"),
    ('[campaign]\ninclude = "a.toml"\n', r"\[campaign\]: key 'include': Input should be a valid list"),
    ('[[config]]\nid = "X"\nengine = "e"\nbuild = "1"\npriority = "high"\n',
     "config X: key 'priority': Input should be a valid integer"),
])
def test_bad_study_files_are_refused_naming_what_is_wrong(tmp_path, text, message):
    (tmp_path / "a.toml").write_text('[[config]]\nid = "LCP-1-19"\nengine = "llama_cpp"\nbuild = "0.3.19"\n')
    (tmp_path / "b.toml").write_text('[[config]]\nid = "HF17-6"\nengine = "transformers"\nbuild = "5.17.0"\n')
    (tmp_path / "study.toml").write_text(text)
    with pytest.raises(CampaignError, match=message):
        load_campaign(tmp_path / "study.toml")


def test_the_papers_study_is_one_family_of_26_with_three_confirmation_groups():
    from pathlib import Path

    camp = load_campaign(Path(__file__).parents[1] / "campaigns" / "paper.toml")
    assert len(camp.configs) == camp.m == 26 and confirmation_m(camp.configs) == 3  # Table 2 and Table 3
    builds = {(c["engine"], c["build"]) for c in camp.configs}
    assert builds == {("transformers", "5.17.0"), ("transformers", "5.12.0"), ("llama_cpp", "0.3.19"),
                      ("llama_cpp", "0.3.35")}
    # If everything with a repair fails eligibly, the sealed priorities pick the paper's S3 rows.
    fails = _decision("fails")
    sel = select_confirmations(camp.configs, {c["id"]: fails for c in camp.configs})
    assert sel.attempts == ("HF17-6", "LCP-2-19", "LCP-2-35")


def test_each_stratum_of_a_comparison_gets_its_own_attempt_per_cause_and_build():
    # RQ3's design: directed and random configs of one cause on one build are confirmed separately
    configs = [_cfg("D1", stratum="directed", priority=0), _cfg("D2", stratum="directed"),
               _cfg("R1", stratum="random", priority=0), _cfg("R2", stratum="random")]
    d = {"D1": _decision("not-rejected"), "D2": _decision("fails"), "R1": _decision("fails", 1),
         "R2": _decision("fails", 2)}
    sel = select_confirmations(configs, d)
    assert sel.attempts == ("D2", "R1")  # the directed stratum falls back to D2; R1 outranks R2
    assert "(stratum random) is attempted through R1" in sel.not_attempted["R2"]
    assert confirmation_m(configs) == 2
    assert confirmation_m([{k: v for k, v in c.items() if k != "stratum"} for c in configs]) == 1


def test_a_stratum_is_a_non_empty_string(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[config]]\nid = "T"\nengine = "toy"\nbuild = "0.1.0"\nstratum = 3\n')
    with pytest.raises(CampaignError, match="config T: key 'stratum'"):
        load_campaign(path)


def test_the_cell_without_a_h_selects_from_its_own_decisions_and_both_cells_are_confirmed(tmp_path):
    import dataclasses

    from badc_check.selection import joined, without_hypothesis_events

    # guidance (priority 1) fails only through A_H; SynthID (priority 2) fails either way: with A_H the
    # cause is confirmed through guidance, without it through SynthID, and both attempts run
    configs = [_cfg("G", priority=1), _cfg("S", priority=2)]
    g = _decision("fails")
    g = dataclasses.replace(g, without_hypothesis_events={"decision": "NOT_REJECTED", "eligible": False})
    s = _decision("fails", 1)
    d = {"G": g, "S": s}
    with_cell = select_confirmations(configs, d)
    without_cell = select_confirmations(configs, without_hypothesis_events(d))
    assert with_cell.attempts == ("G",) and without_cell.attempts == ("S",)
    both = joined(configs, with_cell, without_cell)
    assert both.attempts == ("G", "S") and both.not_attempted == {} and both.pending == ()
    # sealed only when asked: other campaigns keep their seals; the budget counts both cells
    text = '[[config]]\nid = "T"\nengine = "toy"\nbuild = "0.1.0"\nrepair = "toy/logical-rows"\n'
    plain, cells = tmp_path / "p.toml", tmp_path / "c.toml"
    plain.write_text(text)
    cells.write_text("[campaign]\nconfirm_without_hypothesis_events = true\n" + text)
    a, b = load_campaign(plain), load_campaign(cells)
    assert (a.confirm_m, b.confirm_m) == (1, 2) and a.seal()["seal"] != b.seal()["seal"]
