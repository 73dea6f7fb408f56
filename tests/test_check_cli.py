"""`badc check COUNTS.json`: decisions from counts collected elsewhere, clear errors on bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest

from badc_check.cli import main
from tests.lawgen import random_law, sample, shifted_law

REPORT_FIELDS = {"id", "engine", "build", "role", "decision", "eligible", "D", "witnesses", "draws", "crashes",
                 "exercise", "calibration", "hypothesis", "records", "repair", "contract"}


def _counts_file(tmp_path, doc):
    path = tmp_path / "counts.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _doc():
    p = random_law(5)
    mu = shifted_law(p, 0.1, seed=2)
    rng = np.random.default_rng(0)
    return {
        "alpha": 0.05, "threshold": 0.01, "m": 2,
        "configs": [
            {"id": "NEG", "role": "negative-control", "engine": "llama_cpp", "build": "0.3.36",
             "on": sample(p, 20000, rng), "off": sample(p, 20000, rng), "reference": p,
             "exercise": {"proposed": 900, "accepted": 300}},
            {"id": "PROBE", "on": sample(mu, 20000, rng), "off": sample(p, 20000, rng), "reference": p,
             "predicates": {"allowed": ["9|eos"]}, "exercise": {"proposed": 900},
             "hypothesis": {"id": "H-D1-phys", "law": mu}},
        ],
    }


def test_json_output_has_the_report_fields(tmp_path, capsys):
    assert main(["check", _counts_file(tmp_path, _doc()), "--json"]) == 1  # PROBE FAILS
    out = json.loads(capsys.readouterr().out)
    assert out["alpha"] == 0.05 and out["m"] == 2
    neg, probe = out["configs"]
    assert REPORT_FIELDS <= set(neg)
    assert neg["decision"] == "NOT_REJECTED" and neg["calibration"]["passed"] is True
    assert probe["decision"] == "FAILS" and probe["eligible"] is True and probe["D"] > 0.01
    assert probe["hypothesis"] == {**probe["hypothesis"], "id": "H-D1-phys", "compatible": True,
                                   "null_rejected": True}
    assert probe["records"]["status"] == "not_returned"


def test_table_output_and_anytime_mode(tmp_path, capsys):
    path = _counts_file(tmp_path, _doc())
    assert main(["check", path]) == 1
    text = capsys.readouterr().out
    assert "NOT_REJECTED" in text and "FAILS" in text and "H-D1-phys: compatible" in text
    assert "without A_H and its complement (the same draws" in text  # PROBE has a hypothesis
    assert main(["check", path, "--anytime", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["anytime"] is True and out["configs"][1]["decision"] == "FAILS"


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["configs"][0]["on"].update({"3 x|eos": 4}), "configs[0].on['3 x|eos']: outcome"),
    (lambda d: d["configs"][0]["on"].update({"3|eos": -1}), "configs[0].on['3|eos']: expected an integer from 0"),
    (lambda d: d["configs"][1].pop("off"), "configs[1]: missing field 'off'"),
    (lambda d: d["configs"][0].update({"reference": {"1|eos": 0.7}}), "configs[0].reference: probabilities sum"),
    (lambda d: d.update({"alpha": 2}), "alpha: expected a probability"),
    (lambda d: d.update({"m": 1}), "m: expected an integer >= the number of configs"),
    (lambda d: d["configs"][1].update({"id": "NEG"}), "duplicate ids: NEG"),
    (lambda d: d["configs"][1]["predicates"].update({"allowed": "9|eos"}), "expected a list of violating"),
    (lambda d: d["configs"][0].update({"records": {"status": "complete"}}), "needs 'on' and 'off' record"),
    # impossible counts
    (lambda d: d["configs"][0].update({"violations": {"on": 20001}}), "configs[0].violations.on: 20001 violating"),
    (lambda d: d["configs"][0].update({"exercise": {"proposed": 3, "accepted": 4}}), "4 draft tokens accepted of 3"),
    (lambda d: d["configs"][0].update({"reference": {"1|eos": float("nan")}}), "configs[0].reference['1|eos']"),
    (lambda d: d["configs"][0]["on"].update({"3|eos": 2.5}), "expected an integer from 0 to 2**53, got 2.5"),
    # hostile or mistaken inputs (each was a traceback or silently accepted before)
    (lambda d: d["configs"][0]["on"].update({"²|eos": 1}), "configs[0].on['²|eos']: outcome"),
    (lambda d: d["configs"][0]["on"].update({"03|eos": 1}), "without leading zeros"),
    (lambda d: d["configs"][0]["on"].update({"٣|eos": 1}), "ASCII integers"),
    (lambda d: d["configs"][0]["on"].update({"３|eos": 1}), "ASCII integers"),
    (lambda d: d["configs"][0]["on"].update({"3|e os": 1}), "termination code"),
    (lambda d: d["configs"][1].update({"support": [["3|eos"]]}),
     "configs[1].support: outcome ['3|eos'] is not a string"),
    (lambda d: d["configs"][1]["predicates"].update({"allowed": [["9|eos"]]}), "is not a string"),
    (lambda d: d["configs"][0]["off"].update({"3|eos": 10**300}), "expected an integer from 0 to 2**53, got 1000"),
    (lambda d: d["configs"][0].update({"engine": 7}), "configs[0].engine: expected a string"),
    (lambda d: d["configs"][0].update({"records": {"status": "complete", "on": {"draws": 30000, "mismatch": 0},
                                                   "off": {"draws": 10, "mismatch": 0}}}),
     "configs[0].records.on.draws: 30000 draws with records in an arm of 20000"),
    (lambda d: d["configs"][0].update({"records": {"status": "complete", "off": {"draws": 10, "mismatch": 0},
                                                   "on": {"draws": 10, "mismatch": 1, "positions": {"1": 2}}}}),
     "2 draws mismatch at position 1, but only 1"),
])
def test_bad_input_names_the_field(tmp_path, capsys, mutate, message):
    doc = _doc()
    mutate(doc)
    assert main(["check", _counts_file(tmp_path, doc)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_replay_violations_are_reported_as_the_contract_channel_not_as_d(tmp_path, capsys):
    # Equal laws with replay violations in 10% of on-arm draws: a lossless returned law is not rejected,
    # and the broken contract is said beside it (the issue's counts file: it used to FAIL with D 0.0968).
    doc = _doc()
    neg = doc["configs"][0]
    neg["violations"] = {"on": 2000, "off": 0}
    doc["configs"][1]["violations"] = {"on": 0, "off": 0}
    assert main(["check", _counts_file(tmp_path, doc), "--json"]) == 1  # broken contract, PROBE FAILS
    out = json.loads(capsys.readouterr().out)
    assert out["configs"][0]["decision"] == "NOT_REJECTED" and out["configs"][0]["D"] < 0.01
    assert out["configs"][0]["contract"]["status"] == "broken"
    assert out["configs"][1]["contract"]["status"] == "held"
    del doc["configs"][1]["violations"]
    assert main(["check", _counts_file(tmp_path, doc)]) == 1
    text = capsys.readouterr().out
    assert "contract BROKEN: 2,000 of 20,000 on-arm requests" in text and "returned-output law was not rejected" in text
    assert "PROBE: FAILS" in text and "contract UNCHECKED: no trace replay" in text


def test_bounds_refuse_impossible_counts_and_never_return_nan():
    from badc_check.bounds import BoundError, cp_lower, cp_upper, cs_lower

    with pytest.raises(BoundError, match="impossible counts: 5 events in 4 draws"):
        cp_lower(5, 4, 0.01)
    with pytest.raises(BoundError, match="impossible counts"):
        cp_upper(np.array([1, -1]), 10, 0.01)
    with pytest.raises(BoundError, match="tail"):
        cs_lower(1, 10, float("nan"))
    assert cp_lower(0, 0, 0.01) == 0 and cp_upper(0, 0, 0.01) == 1  # an empty arm: trivial, but said so


@pytest.mark.parametrize("text, message", [
    ('{"alpha": 0.05, "alpha": 0.01, "configs": []}', "key 'alpha' appears twice"),
    ("[" * 1000 + "]" * 1000, "nested too deeply"),
    ('{"m": ' + "9" * 5000 + "}", "not a counts file"),
    (b"{\"configs\": \"\xff\"}", "not UTF-8"),
])
def test_hostile_files_are_refused_in_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "c.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert main(["check", str(tmp_path)]) == 2  # a folder
    assert "is a folder" in capsys.readouterr().err


def test_unreadable_files(tmp_path, capsys):
    assert main(["check", str(tmp_path / "missing.json")]) == 2
    assert "not found" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"configs": [}')
    assert main(["check", str(bad)]) == 2
    assert "line 1 column" in capsys.readouterr().err


def test_console_script_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "badc_check.cli", "check", _counts_file(tmp_path, _doc())],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "PROBE" in proc.stdout and "REJECTED: PROBE: FAILS" in proc.stderr


def test_the_exit_status_says_rejected_unchecked_or_neither(tmp_path, capsys):
    # 0 only for decisions from work done in full with nothing rejected; 1 for a FAILS or a broken contract,
    # whatever else; 3 when nothing is rejected but something is not decided. Each finding is on stderr.
    doc = _doc()
    del doc["configs"][1]
    doc["m"] = 1
    assert main(["check", _counts_file(tmp_path, doc)]) == 0
    assert capsys.readouterr().err == ""
    doc["configs"][0]["exercise"] = {"proposed": 0}  # speculation never proposed: not a test of it
    assert main(["check", _counts_file(tmp_path, doc)]) == 3
    err = capsys.readouterr().err
    assert "badc check: UNCHECKED: NEG: INCONCLUSIVE" in err and "REJECTED" not in err
    doc["configs"][0]["violations"] = {"on": 5, "off": 0}  # a broken contract outranks the unchecked decision
    assert main(["check", _counts_file(tmp_path, doc)]) == 1
    err = capsys.readouterr().err
    assert "badc check: REJECTED: NEG: on-arm contract broken (5 of 20,000 requests)" in err
    assert "badc check: UNCHECKED: NEG: INCONCLUSIVE" in err
    doc["configs"][0].update(exercise={"proposed": 900}, violations={"on": 0, "off": 3})
    assert main(["check", _counts_file(tmp_path, doc), "--json"]) == 1  # an off-arm violation: VOID, and a finding
    assert json.loads(capsys.readouterr().out)["configs"][0]["decision"] == "VOID"
