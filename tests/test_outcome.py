"""The exit status of a set of decisions (badc_check/outcome.py): what each kind of unchecked part says."""

from badc_check.outcome import outcome


def config(cid="C", decision="NOT_REJECTED", **kw):
    held = {"status": "held", "requests": 100, "violating_requests": 0, "left_unchecked": [], "exposure": {}}
    return {"id": cid, "decision": decision, "reasons": [], "contract": {**held, "off": dict(held)}, **kw}


def test_only_a_config_decided_in_full_with_its_contract_held_exits_0():
    assert outcome([config()]).exit_code == 0 and outcome([config()]).lines("badc run") == []


def test_each_unchecked_part_is_named_and_exits_3():
    cases = {
        "no trace replay of the on arm": config(contract=None),
        "on-arm contract unchecked: 3 requests lost to a torn tail": config(contract={
            **config()["contract"], "status": "unchecked", "left_unchecked": ["3 requests lost to a torn tail"]}),
        "calibration and witnesses were not checkable": config(family_source="pilot"),
        "bad_words never acted on a draft": config(contract={**config()["contract"], "exposure": {"bad_words": 0}}),
        "C: VOID (off-arm": config(decision="VOID", reasons=["off-arm contract violation"]),
    }
    for text, c in cases.items():
        result = outcome([c])
        assert result.exit_code == 3 and not result.rejected, text
        assert any(text in u for u in result.unchecked), (text, result.unchecked)
    assert outcome([], pending=[{"id": "P", "failed": None}]).unchecked == ("P: pending, not decided",)
    # a counts file without a contract channel decides the returned outputs only
    assert outcome([config(contract=None)], contract_required=False).exit_code == 0


def test_a_rejection_outranks_what_is_unchecked_and_both_are_said():
    off_broken = config()
    off_broken["contract"]["off"] = {"status": "broken", "requests": 100, "violating_requests": 2}
    result = outcome([config("A", "FAILS", reasons=["D = 0.2 > 0.01 on len=2", "more"]), off_broken,
                      config("B", "INCONCLUSIVE", reasons=["zero proposals"])])
    assert result.exit_code == 1
    assert result.rejected == ("A: FAILS (D = 0.2 > 0.01 on len=2)", "C: off-arm contract broken (2 of 100 requests)")
    assert result.unchecked == ("B: INCONCLUSIVE (zero proposals)",)
    assert result.lines("badc run")[0] == "badc run: REJECTED: A: FAILS (D = 0.2 > 0.01 on len=2)"
