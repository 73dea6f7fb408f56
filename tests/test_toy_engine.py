"""The toy engine shipped with badc: exact laws (sample-and-match is lossless, so speculation on without
a defect reproduces P exactly), each planted defect found by the channel it belongs to, and the generic
campaign runner end to end on it (fixed seeds, known truths)."""

import subprocess
import sys

import pytest

from badc_check.campaign import load_campaign, run_campaign
from badc_check.confirmation import least_confirm_draws
from badc_replay.arms import collect, process_harness
from badc_replay.contract import replay_trace
from badc_toy.replay import ENGINE

MIN_TOKENS = [{"name": "min_tokens", "min_tokens": 3}]
STOP = [{"name": "last_id", "token": 2}]


def tv(p, q):
    return 0.5 * sum(abs(p.get(y, 0.0) - q.get(y, 0.0)) for y in set(p) | set(q))


def cfg(**kw):
    return ENGINE.parse_config({"id": "T", **kw})


@pytest.mark.parametrize("kw, hypothesis, at_least", [
    (dict(processors=MIN_TOKENS), "H-D1", 0.2),  # processors read the buffer: EOS unmasked too early
    (dict(processors=[{"name": "no_repeat"}]), "H-D2", 0.5),  # state advanced by rejected rows
    (dict(stopping=STOP), "H-D3", 0.3),  # stops passed inside a block
])
def test_exact_laws_the_lossless_check_and_each_defects_law(kw, hypothesis, at_least):
    c = cfg(**kw)
    p = ENGINE.reference_law(c).law
    assert abs(sum(p.values()) - 1) < 1e-12
    assert ENGINE.simulator_check(c).value < 1e-12  # speculation on, no defect: P exactly
    assert tv(p, ENGINE.hypothesis_law(c, hypothesis).law) > at_least
    plain = cfg()  # without the feature a defect reads, planting it changes nothing
    assert tv(ENGINE.reference_law(plain).law, ENGINE.hypothesis_law(plain, hypothesis).law) < 1e-12


@pytest.mark.parametrize("kw, kind", [
    (dict(processors=MIN_TOKENS, defects=["D1"]), "D1"),
    (dict(processors=[{"name": "no_repeat"}], defects=["D2"]), "D2"),
    (dict(stopping=STOP, defects=["D3"]), "D3"),
])
def test_trace_replay_finds_each_planted_defect_and_holds_without_it(tmp_path, kw, kind):
    defective = collect(ENGINE, cfg(**kw), "on", 300, 1, trace_path=str(tmp_path / "bad.badc"))
    assert defective.contract["status"] == "broken" and set(defective.contract["by_class"]) == {kind}
    first = defective.contract["first_violation"]
    assert first["kind"] == kind and first["message"].startswith(f"request {first['request']}, call ")
    clean = collect(ENGINE, cfg(**{k: v for k, v in kw.items() if k != "defects"}), "on", 300, 1,
                           trace_path=str(tmp_path / "good.badc"))
    assert clean.contract["status"] == "held" and clean.contract["requests"] == 300 and clean.proposed > 0
    assert replay_trace(str(tmp_path / "good.badc")).status == "held"
    # From the command line: exit 1 on the defect, 0 on the clean trace.
    for name, code in (("bad", 1), ("good", 0)):
        proc = subprocess.run([sys.executable, "-m", "badc_check.cli", "replay", str(tmp_path / f"{name}.badc")],
                              capture_output=True, text=True)
        assert proc.returncode == code, proc.stdout + proc.stderr


def test_a_request_that_crashed_is_never_reported_held(tmp_path):
    # A crash ends a request before the calls sequential decoding would have made: its contract was not
    # checked in full, so a trace whose requests crashed is unchecked (exit 3), never held (exit 0).
    from badc_trace.format import TraceWriter, read_trace

    collect(ENGINE, cfg(processors=MIN_TOKENS), "on", 20, 1, trace_path=str(tmp_path / "good.badc"))
    r = read_trace(str(tmp_path / "good.badc"))
    with TraceWriter(str(tmp_path / "crashed.badc"), engine="toy", build=r.header["build"],
                     config=r.header["config"]) as w:
        for rec in r:
            if rec.get("req") == 3 and rec["type"] == "return":
                w.write({"type": "crash", "req": 3, "where": "caller", "exc": "RuntimeError", "message": "boom"})
                rec = {**rec, "tokens": [], "finish_reason": "crash", "outcome": "|crash:RuntimeError"}
            w.write(rec)
    res = replay_trace(str(tmp_path / "crashed.badc"))
    assert res.status == "unchecked" and res.violations == 0
    assert [(why, n) for why, n in res.partial.items() if "crashed" in why] == [(next(iter(res.partial)), 1)]
    proc = subprocess.run([sys.executable, "-m", "badc_check.cli", "replay", str(tmp_path / "crashed.badc")],
                          capture_output=True, text=True)
    assert proc.returncode == 3 and "crashed" in proc.stderr, proc.stdout + proc.stderr


def test_a_check_that_reads_nothing_is_never_reported_held(tmp_path, monkeypatch):
    # An engine whose contract check returns no violation without looking at its request checked
    # nothing: each such request is unchecked (exit 3), never held, whatever the trace holds.
    from badc_replay.contract import NOT_READ

    collect(ENGINE, cfg(processors=MIN_TOKENS, defects=["D1"]), "on", 20, 1, trace_path=str(tmp_path / "t.badc"))
    assert replay_trace(str(tmp_path / "t.badc")).status == "broken"
    monkeypatch.setattr(type(ENGINE), "check_request", lambda self, records, config, context=None: [])
    res = replay_trace(str(tmp_path / "t.badc"))
    assert res.status == "unchecked" and res.partial == {NOT_READ: 20} and res.calls > 0
    # a check that reads its request and finds nothing is held as before
    monkeypatch.setattr(type(ENGINE), "check_request", lambda self, records, config, context=None: [
        r for r in records if r["type"] == "no such record"])
    assert replay_trace(str(tmp_path / "t.badc")).status == "held"


def test_returned_logprobs_are_checked_against_the_model_d4(tmp_path):
    bad = collect(ENGINE, cfg(logprobs=True, defects=["D4"]), "on", 500, 2, trace_path=str(tmp_path / "a.badc"))
    good = collect(ENGINE, cfg(logprobs=True), "on", 500, 2, trace_path=str(tmp_path / "b.badc"))
    off = collect(ENGINE, cfg(logprobs=True, defects=["D4"]), "off", 500, 2, trace_path=str(tmp_path / "c.badc"))
    assert bad.records["draws"] == 500 and bad.records["mismatch"] > 20  # 44 with this seed
    assert bad.records["first_mismatch"]["position"] >= 1
    assert good.records["mismatch"] == 0 and off.records["mismatch"] == 0  # speculation off never drafts


def test_the_probe_leaves_nothing_patched():
    from badc_toy.engine import ToyEngine
    from badc_toy.probe import ToyInstrumentor

    names = ("generate", "_propose", "_call_processor", "_check_stop", "_verified")
    before = {n: ToyEngine.__dict__[n] for n in names}
    probe = ToyInstrumentor()
    probe.instrument()
    assert all(ToyEngine.__dict__[n] is not before[n] for n in names)
    probe.uninstrument()
    assert {n: ToyEngine.__dict__[n] for n in names} == before and not probe.is_instrumented


def test_the_probe_contract_is_the_base_class_s(tmp_path):
    # Ids from the probe's own sequence (the arms renumber through it), the request in progress and
    # `last_request` kept by BaseInstrumentor's begin/end helpers, a crash outcome named after the first
    # crash, and named counters: a misspelt one is refused instead of leaving `proposed` at 0.
    import itertools

    from badc_toy.engine import ToyEngine, ToyModel
    from badc_toy.probe import ToyInstrumentor
    from badc_trace.format import TraceWriter, read_trace
    from badc_trace.instrument import Counter, Request, TraceSink
    from badc_trace.outcomes import format_outcome

    engine = ToyEngine(ToyModel(0), speculative=True, processors=[{"name": "min_tokens", "min_tokens": 2}])
    probe = ToyInstrumentor()
    with TraceWriter(tmp_path / "t.badc", engine="toy", build="0.1.0") as w:
        sink = TraceSink(w, level="calls")
        probe.instrument(sink)
        try:
            probe._ids = itertools.count(40)
            engine.generate([1, 2, 1, 2], 6, lambda p: int(p.argmax()))
            first = probe.last_request
            assert isinstance(first, Request) and first.id == 40 and first.crash is None and probe._req is None
            with pytest.raises(ZeroDivisionError):
                engine.generate([1, 2], 6, lambda p: 1 // 0)
            crashed = probe.last_request
            assert crashed.id == 41 and crashed.crash == "ZeroDivisionError" and probe._req is None
            assert crashed.outcome == format_outcome([], "crash:ZeroDivisionError")
        finally:
            probe.uninstrument()
    assert sink.counters[Counter.REQUESTS] == 2 and sink.counters[Counter.PROPOSED] > 0
    with pytest.raises(ValueError, match="unknown counter 'propsed'"):
        sink.count("propsed")
    returns = {r["req"]: r for r in read_trace(tmp_path / "t.badc") if r["type"] == "return"}
    assert returns[40]["outcome"] == first.outcome and returns[41]["finish_reason"] == "crash"
    assert [r["type"] for r in read_trace(tmp_path / "t.badc") if r.get("req") == 41][-2:] == ["crash", "return"]


CAMPAIGN = """
[campaign]
name = "toy"
draws = 4000
confirm_draws = 4000
seed = 5
shard = 2000

[defaults]
engine = "toy"
build = "0.1.0"

[[config]]
id = "NEG"
role = "negative-control"
processors = [{ name = "min_tokens", min_tokens = 3 }]
predicates = ["min_tokens"]

[[config]]
id = "D1"
processors = [{ name = "min_tokens", min_tokens = 3 }]
defects = ["D1"]
hypothesis = "H-D1"
predicates = ["min_tokens"]
repair = "toy/logical-rows"

[[config]]
id = "D3"
stopping = [{ name = "last_id", token = 2 }]
defects = ["D3"]
hypothesis = "H-D3"
predicates = ["past_stop"]
repair = "toy/logical-rows"
"""


def test_the_campaign_runner_end_to_end_on_the_toy_engine(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_text(CAMPAIGN)
    logged: list[str] = []
    report = run_campaign(load_campaign(path), tmp_path / "out", workers=2, log=logged.append, plots=False)
    by_id = {c["id"]: c for c in report["configs"]}
    neg, d1, d3 = by_id["NEG"], by_id["D1"], by_id["D3"]
    assert neg["decision"] == "NOT_REJECTED" and neg["calibration"]["passed"] is True
    assert neg["contract"]["status"] == "held" and neg["witnesses"] == 0
    for c, kind in ((d1, "D1"), (d3, "D3")):
        assert c["decision"] == "FAILS" and c["eligible"] and c["witnesses"] > 0
        assert c["hypothesis"]["compatible"] is True and c["hypothesis"]["null_rejected"] is True
        assert c["contract"]["status"] == "broken" and set(c["contract"]["by_class"]) == {kind}
        assert c["contract"]["off"]["status"] == "held"  # speculation off: the contract holds (A5)
    assert report["m"] == 3 and by_id["D1"]["D"] > 0.1
    # S3: one confirmation attempt per cause (the repair) and build: D1's, the first by roster order. The
    # repair removes the defect (no witness in 4,000 repaired draws, the recurrence is D1's witness rate),
    # but 4,000 draws cannot bound the witness rate below 1e-4: not confirmed, saying so.
    assert report["confirmation_attempts"] == ["D1"]
    rep = d1["repair"]
    assert rep["attempted"] and rep["exercised"] and rep["calibration_passed"] and rep["recurrence"] > 0.15
    assert rep["confirmed"] is False and rep["witness_ub"] < 3e-3
    assert rep["reasons"] == [f"repaired witness-rate upper bound {rep['witness_ub']:.2e} > 0.0001"]
    # which the run said before drawing: the least draws that can confirm at this campaign's budget
    assert report["confirm_draws_needed"] == least_confirm_draws(0.05, report["confirm_m"]) > 50_000
    needed = report["confirm_draws_needed"]
    assert logged[0] == (f"badc run: warning: 4,000 draws per confirmation arm cannot confirm any repair (a repaired "
                         f"arm without a single witness still bounds its witness rate above 0.0001 at alpha 0.05 over "
                         f"m = 1); {needed:,} can. Stage S3 still runs, and every repair it attempts will be reported "
                         "not confirmed.")
    assert f"**4,000 draws per confirmation arm cannot confirm any repair: at least {needed:,} can**" in \
        (tmp_path / "out" / "report.md").read_text()
    assert d3["repair"]["attempted"] is False and "attempted through D1" in d3["repair"]["reasons"][0]
    # beside the rule, the repaired arm's own trace replay: the repaired engine's calls keep the contract
    held = rep["contract"]
    assert held["status"] == "held" and held["calls"] > 4000 and held["violations"] == 0
    assert (f"- repair toy/logical-rows: the repaired arm's calls keep the contract ({held['calls']:,} calls of 4,000 "
            "requests replayed)") in (tmp_path / "out" / "report.md").read_text()
    # Beside each decision (#27): the comparator C at alpha / m, and the complete marginal bounds, one
    # simultaneous construction over first token, visible length and termination (and the repaired arm)
    assert neg["comparator"]["agreement"] == "neither rejected" and neg["comparator"]["level"] == 0.05 / 3
    assert d1["comparator"]["rejected"] and d1["comparator"]["agreement"] == "both rejected"
    for c in (neg, d1, d3):
        assert set(c["marginals"]["bounds"]) == {"first token", "visible length", "termination"}
    assert all(b["lower"] == 0 for row in neg["marginals"]["bounds"].values() for b in row.values())
    assert max(row["on/off"]["lower"] for row in d1["marginals"]["bounds"].values()) > 0.05
    assert "repaired/off" in d1["marginals"]["bounds"]["visible length"] and "repaired/off" not in \
        neg["marginals"]["bounds"]["visible length"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "comparator C (permutation chi-square" in md and "both rejected" in md and "marginal TV" in md


CONFIRM_ANYTIME = """
[campaign]
name = "toy-s3-looks"
draws = 4000
confirm_draws = 40000
confirm_anytime = true
seed = 5
shard = 10000

[[config]]
id = "D1"
engine = "toy"
build = "0.1.0"
processors = [{ name = "min_tokens", min_tokens = 3 }]
defects = ["D1"]
hypothesis = "H-D1"
predicates = ["min_tokens"]
repair = "toy/logical-rows"
"""


def test_confirm_anytime_stops_the_unrepaired_arm_at_the_look_that_recurs(tmp_path, capsys):
    # Stage S3 with looks: D1's unrepaired engine recurs (fresh witnesses) on the first look's 1,250 draws,
    # so its on-confirm chain is stopped; the off-confirm and repaired arms are drawn whole (their gap and
    # witness bounds need every draw); the result reads the on-confirm prefix at that look only, whatever
    # the chain drew before its stop mark, and a second run reads the same shards and draws nothing.
    import json

    from badc_check.campaign import CampaignError
    from badc_check.cli import main
    from badc_check.looks import planned_looks

    path = tmp_path / "s3.toml"
    path.write_text(CONFIRM_ANYTIME)
    camp, out, logged = load_campaign(path), tmp_path / "out", []
    report = run_campaign(camp, out, workers=2, log=logged.append, plots=False)
    looks = planned_looks(40_000)
    assert report["confirm_anytime"] == [look.to_dict() for look in looks] and len(looks) == 6
    rep = report["configs"][0]["repair"]
    assert rep["attempted"] and rep["recurrence_look"] == looks[0].to_dict() and rep["recurrence_witnesses"] > 0
    assert rep["exercised"] and rep["calibration_passed"] and rep["gap_ub"] < 0.05
    assert rep["reasons"] == [f"repaired witness-rate upper bound {rep['witness_ub']:.2e} > 0.0001"]  # 40,000 < least
    assert "D1: the unrepaired arm recurs at look 1 of 6 (1,250 draws per arm): its remaining on-confirm shards " \
           "are not needed" in logged

    def drawn(arm):
        return sum(json.loads(f.read_text())["count"] for f in (out / "shards" / "D1").glob(f"{arm}-*.json"))

    assert drawn("off-confirm") == drawn("repaired") == 40_000
    shards = [json.loads(f.read_text()) for f in (out / "shards" / "D1").glob("*.json")]
    assert all(0 < s["cpu_s"] <= 2 * s["elapsed_s"] + 1 for s in shards)  # each worker's CPU time, for core-hours
    assert 1_250 <= drawn("on-confirm") < 40_000  # stopped: at most the shards begun before the mark
    md = (out / "report.md").read_text()
    assert "at look 1 of 6, 1,250 draws" in md and "Stage S3 with looks: 6 planned looks at 1,250, 2,500" in md
    # what the shards cost their workers (elapsed, and CPU since every shard records it)
    w = report["worker_core_hours"]
    assert 0 < w["cpu"] <= 2 * w["elapsed"] and f"{w['elapsed']:.2f} core-hours elapsed, {w['cpu']:.2f} CPU" in md
    before = drawn("on-confirm")
    again = run_campaign(camp, out, workers=2, log=lambda m: None, plots=False)
    assert again["configs"][0]["repair"] == rep and drawn("on-confirm") == before  # the rerun drew no more of it
    # a partial report while the repaired arm is still drawing says the unrepaired arm has enough
    (out / "shards" / "D1" / "repaired-30000.json").unlink()
    old = out / "shards" / "D1" / "off-0.json"  # a shard from before CPU time was recorded
    old.write_text(json.dumps({k: v for k, v in json.loads(old.read_text()).items() if k != "cpu_s"}))
    partial = run_campaign(camp, out, partial=True, log=lambda m: None, plots=False)
    assert partial["worker_core_hours"]["cpu"] is None and partial["worker_core_hours"]["elapsed"] > 0
    pending = partial["pending"][0]["draws"]
    assert pending["repaired"] == "30,000/40,000" and pending["on-confirm"] == \
        f"{before:,}/40,000 (enough: it recurs at look 1 of 6 (1,250 draws per arm))"
    # the rule is sealed: the same folder without the looks is refused, and looks without S3 draws are an error
    path.write_text(CONFIRM_ANYTIME.replace("confirm_anytime = true\n", ""))
    with pytest.raises(CampaignError, match="settings"):
        run_campaign(load_campaign(path), out, log=lambda m: None, plots=False)
    path.write_text(CONFIRM_ANYTIME.replace("confirm_anytime = true\n", "").replace("confirm_draws = 40000", ""))
    assert main(["run", str(path), "--out", str(tmp_path / "new"), "--confirm-anytime"]) == 2  # the flag alike
    assert "s3.toml: confirm_anytime (stage S3 with looks) needs confirmation draws" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # refused before anything is sealed


def test_messages_show_text_beside_ids_and_diff_by_prefix_finds_the_planted_defect(tmp_path, capsys):
    # The probe writes the vocabulary once per trace: replay and diff show text beside token ids. A run
    # with speculation against the same draws without it, matched by logical prefix: the planted D1
    # (processors read unverified drafts) is the first divergence; without the defect there is none.
    import json

    from badc_check.cli import main

    bad, good = cfg(processors=MIN_TOKENS, defects=["D1"]), cfg(processors=MIN_TOKENS)
    collect(ENGINE, bad, "on", 200, 1, trace_path=str(tmp_path / "bad.badc"))
    collect(ENGINE, good, "on", 200, 1, trace_path=str(tmp_path / "good.badc"))
    collect(ENGINE, good, "off", 200, 1, trace_path=str(tmp_path / "off.badc"), seed_arm="on")
    assert main(["replay", str(tmp_path / "bad.badc"), "--json"]) == 1
    first = json.loads(capsys.readouterr().out)["first_violation"]
    prompt = "".join("abcde"[t] for t in good.prompt)
    assert first["text"]["prefix"].startswith(repr(prompt)[:-1]) and repr(prompt)[:-1] in first["message"]
    assert main(["diff", "--by-prefix", str(tmp_path / "bad.badc"), str(tmp_path / "off.badc")]) == 0
    md = capsys.readouterr().out
    assert "first divergence by logical prefix" in md and "in `ids`" in md and "| ids **≠** |" in md
    assert repr(prompt)[:-1] in md
    assert main(["diff", "--by-prefix", str(tmp_path / "good.badc"), str(tmp_path / "off.badc")]) == 0
    md = capsys.readouterr().out
    agreeing = int(md.split("A's ")[1].split(" calls")[0])
    assert "No divergence" in md and agreeing > 200, md
    # record by record, the two runs differ in kind at once: the message points to --by-prefix
    assert main(["diff", str(tmp_path / "good.badc"), str(tmp_path / "off.badc")]) == 0
    assert "--by-prefix" in capsys.readouterr().out
    # "no divergence" about nothing is not a result: a trace without requests, either way, exits 3
    from badc_trace.format import TraceWriter

    TraceWriter(str(tmp_path / "empty.badc"), engine="toy", build="0.1.0", config={}, seal="").close()
    for flags in ([], ["--by-prefix"]):
        assert main(["diff", *flags, str(tmp_path / "empty.badc"), str(tmp_path / "empty.badc")]) == 3
        assert "UNCHECKED: nothing was compared" in capsys.readouterr().err


def test_a_process_keeps_one_harness_per_config_arm_and_patches():
    # a chain's shards share their arm's harness; another arm, or the same arm with a repair, gets its own
    # (engine state and repairs without an undo must not cross arms: the KV cache did, in cee06f6)
    c = cfg(processors=MIN_TOKENS)
    on = process_harness(ENGINE, c, "on")
    assert process_harness(ENGINE, c, "on") is on
    assert process_harness(ENGINE, c, "on", ["toy/logical-rows"]) is not on  # same arm, a repair applied
    assert process_harness(ENGINE, c, "on") is not on  # one kept at a time: the last one made
    on = process_harness(ENGINE, c, "on")
    assert process_harness(ENGINE, c, "on-confirm") is not on  # another arm with speculation
    assert process_harness(ENGINE, c, "off") is not process_harness(ENGINE, c, "on")


def test_the_toy_engine_passes_the_conformance_kit(tmp_path):
    from badc_replay.testing import PASSED, check_engine

    result = check_engine(ENGINE, {"id": "KIT", "processors": MIN_TOKENS}, tmp_path, draws=40)
    assert {c.name: c.status for c in result.checks} == dict.fromkeys(
        ["config", "law", "simulator", "predicates", "arm", "drafting", "unread", "exact"], PASSED), result.summary()
    assert result.capabilities == ("Hypotheses", "Predicates", "ReturnedRecords", "ExactChannel")
    assert "3 built and evaluated on P's" in result.by_name("predicates").detail


def test_the_conformance_kit_fails_a_predicate_that_is_not_a_test_of_outcomes(tmp_path):
    # A registered predicate that returns a count instead of a bool is named (its `any` left out).
    import copy

    from badc_replay.testing import FAILED, conformance
    from badc_trace.outcomes import parse_outcome

    sloppy = copy.copy(ENGINE)
    sloppy.predicates = {**ENGINE.predicates,  # type: ignore[misc]
                         "past_stop": lambda cfg: lambda y: sum(t == 4 for t in parse_outcome(y).tokens)}
    result = conformance(sloppy, {"id": "KIT", "processors": MIN_TOKENS}, tmp_path, draws=10, exact=False)
    assert result.by_name("predicates").status == FAILED
    assert "past_stop gives int, not bool" in result.by_name("predicates").detail


def test_the_conformance_kit_fails_an_engine_with_a_planted_defect(tmp_path):
    # The kit can fail: the toy engine with D1 planted (its processors read the evaluation buffer) breaks
    # the contract on the arm and its exact law moves away from P; the rest still passes.
    from badc_replay.testing import FAILED, PASSED, check_engine, conformance

    control = {"id": "KIT-D1", "processors": MIN_TOKENS, "defects": ["D1"]}
    result = conformance(ENGINE, control, tmp_path, draws=40)
    status = {c.name: c.status for c in result.checks}
    assert status["arm"] == FAILED and "contract broken" in result.by_name("arm").detail, result.summary()
    assert status["exact"] == FAILED and status["unread"] == status["config"] == status["law"] == PASSED
    with pytest.raises(AssertionError, match="config KIT-D1: the conformance kit failed"):
        check_engine(ENGINE, control, tmp_path / "again", draws=40)
