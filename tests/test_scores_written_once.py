"""Scores written once (transformers' probe at level full): references resolve to the vectors they name,
and a reference that does not resolve leaves the call without scores, never with another call's."""

from badc_replay.engines.transformers.written_once import with_scores


def _proc(proc, **fields):
    return {"type": "processor", "req": 0, "proc": proc, "role": "verify", "ids": [1, 2], **fields}


def test_references_resolve_to_the_first_elements_input_and_the_last_elements_output():
    records = [{"type": "request", "req": 0, "prompt": [1]},
               _proc(0, scores_in=b"A", scores_out=b"B"), _proc(1, in_previous=True, scores_out=b"C"),
               _proc(-1, scores_elements=2),
               _proc(0, scores_in=b"D", scores_out=b"E"), _proc(-1, scores_in=b"X", scores_out=b"Y")]
    out = with_scores(records)
    assert [(r.get("scores_in"), r.get("scores_out")) for r in out[1:]] == [
        (b"A", b"B"), (b"B", b"C"), (b"A", b"C"), (b"D", b"E"), (b"X", b"Y")]
    assert "scores_in" not in records[2] and "scores_in" not in records[3]  # the input is left as it was


def test_a_reference_that_does_not_resolve_leaves_the_call_without_scores():
    forged = [_proc(1, in_previous=True, scores_out=b"C"),  # no previous element
              _proc(-1, scores_elements=3),  # more elements than were recorded
              _proc(0, scores_out=b"E"), _proc(-1, scores_elements=1)]  # the first has no incoming scores
    out = with_scores(forged)
    assert ["scores_in" in r for r in out] == [False, False, False, False]

