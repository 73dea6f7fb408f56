"""The event family: built from P and hypotheses before any draw, complement-closed, counted exactly."""

import numpy as np

from badc_check.events import EventFamily
from tests.lawgen import random_law

P = {"3 4|length": 0.5, "3|eos": 0.3, "|eos": 0.2}
MU = {"3 4|length": 0.4, "3|eos": 0.3, "5|eos": 0.1, "|eos": 0.2}


def test_family_has_every_event_kind_and_its_complement():
    fam = EventFamily.build(P, {"H": MU})
    ids = [e.id for e in fam.base]
    assert {"y=3 4|length", "y=3|eos", "y=|eos", "y=5|eos"} <= set(ids)  # P and mu_H supports
    assert {"OTHER", "prefix=3", "prefix=5", "prefix=3 4", "len=0", "len=1", "len=2", "code=eos",
            "code=length", "crash", "contract-violation", "A_H(H)"} <= set(ids)
    assert len(fam) == 2 * len(fam.base)
    assert all(f"not {e.id}" in fam.index for e in fam.base)
    assert fam.bounds_per_config == 2 * len(fam)


def test_counts_are_complement_closed_and_unknown_outcomes_fall_in_other():
    fam = EventFamily.build(P, {"H": MU}, violates=lambda y: y.startswith("9"))
    counts = fam.counts({"3 4|length": 5, "3|eos": 2, "9 9|length": 3, "|crash": 1})
    nb = len(fam.base)
    assert (counts[:nb] + counts[nb:] == 11).all()
    c = dict(zip([e.id for e in fam.events], counts, strict=True))
    # The contract-violation event is a set of returned outputs: those violating a registered predicate.
    assert c["OTHER"] == 3 and c["crash"] == 1 and c["contract-violation"] == 3
    assert c["prefix=3"] == 7 and "prefix=9" not in c  # events are fixed before the draws
    assert c["len=2"] == 8 and c["code=length"] == 8 and c["A_H(H)"] == 0
    # Crashes belong to the crash event and to complements only.
    assert c["not OTHER"] == 8 and c["len=0"] == 0


def test_the_contract_violation_event_is_empty_without_predicates_and_has_a_probability_under_a_law():
    fam = EventFamily.build(P, {"H": MU})
    assert fam.counts({"3|eos": 4, "9|eos": 2})[fam.index["contract-violation"]] == 0
    fam = EventFamily.build(P, {"H": MU}, violates=lambda y: y == "5|eos")
    assert fam.probabilities(MU)[fam.index["contract-violation"]] == 0.1
    assert fam.probabilities(P)[fam.index["contract-violation"]] == 0


def test_hypothesis_event_is_where_mu_h_exceeds_p():
    fam = EventFamily.build(P, {"H": MU})
    probs = dict(zip([e.id for e in fam.events], fam.probabilities(MU), strict=True))
    assert probs["A_H(H)"] == 0.1  # only 5|eos gains mass under H
    assert dict(zip([e.id for e in fam.events], fam.probabilities(P), strict=True))["A_H(H)"] == 0


def test_crash_free_events_exclude_observed_crashes():
    fam = EventFamily.build(P, {"H": MU})
    ids = [e.id for e in fam.events]
    assert fam.crash_free({"3|eos": 4}, {"|eos": 1}).all()  # no crash observed: every event qualifies
    flags = dict(zip(ids, fam.crash_free({"3|eos": 4, "|crash:AssertionError": 1}), strict=True))
    assert flags["y=3|eos"] and flags["prefix=3"] and flags["OTHER"] and flags["A_H(H)"]
    assert not flags["crash"] and not flags["not y=3|eos"] and flags["not crash"]


def test_probabilities_of_random_law_sum_consistently():
    law = random_law(3)
    fam = EventFamily.build(law)
    p = fam.probabilities(law)
    nb = len(fam.base)
    assert np.allclose(p[:nb] + p[nb:], 1.0)
    singles = [i for i, e in enumerate(fam.base) if e.kind == "singleton"]
    assert abs(p[singles].sum() - 1) < 1e-12 and p[fam.index["OTHER"]] == 0
    lengths = [i for i, e in enumerate(fam.base) if e.kind == "length"]
    assert abs(p[lengths].sum() - 1) < 1e-12


def test_membership_matrix_agrees_with_counts():
    law = random_law(4)
    fam = EventFamily.build(law)
    keys = list(law)
    m = fam.membership(keys)
    rng = np.random.default_rng(0)
    k = rng.integers(0, 50, size=len(keys))
    assert (k @ m == fam.counts(dict(zip(keys, k.tolist(), strict=True)))[: len(fam.base)]).all()


def test_family_frozen_from_a_pilot():
    # 200 pilot draws: frequent outcomes (share >= 0.01) become singletons, rare ones fall in OTHER;
    # prefixes of share >= 0.01, every length up to the longest, every code; crashes are never singletons.
    from badc_check.events import EventFamily

    pilot = {"5 6 7|eos": 120, "5 6|eos": 60, "5 9 9 9|length": 1, "8|eos": 18, "5|crash:AssertionError": 1}
    fam = EventFamily.from_pilot(pilot)
    ids = {e.id for e in fam.base}
    assert {"y=5 6 7|eos", "y=5 6|eos", "y=8|eos"} <= ids
    assert not {"y=5 9 9 9|length", "y=5|crash:AssertionError", "prefix=5 9"} & ids
    assert {"prefix=5", "prefix=8", "prefix=5 6"} <= ids
    assert {"len=0", "len=4", "code=eos", "code=length"} <= ids and fam.source == "pilot"
    # an outcome never seen in the pilot is counted in OTHER and in its prefix, length and code events
    c = fam.counts({"5 1|eos": 3})
    assert c[fam.index["OTHER"]] == 3 and c[fam.index["prefix=5"]] == 3 and c[fam.index["len=2"]] == 3
    assert c[fam.index["not code=eos"]] == 0
