"""`badc replay TRACE` on hand-made llama_cpp traces: the contract check itself, without an engine."""

from badc_check.cli import main
from badc_trace.format import TraceWriter

PROMPT = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]


def _trace(path, processor_ids, postcheck_ids=None, yielded=(6, 3)):
    with TraceWriter(path, engine="llama_cpp", build="0.3.36", config={"id": "T"}) as w:
        w.write({"type": "request", "req": 0, "api": "create_completion", "prompt": PROMPT, "params": {}})
        w.write({"type": "sample", "req": 0, "idx": 10, "n_tokens": len(processor_ids), "token": 6})
        w.write({"type": "processor", "req": 0, "proc": 0, "name": "P", "ids": processor_ids, "logical_len": 11,
                 "n_tokens": len(processor_ids), "role": "verify", "state": "x"})
        if postcheck_ids is not None:
            w.write({"type": "stop_check", "req": 0, "ids": postcheck_ids, "where": "postcheck", "result": False,
                     "sample_idx": 11})
        w.write({"type": "return", "req": 0, "tokens": list(yielded), "yielded": list(yielded),
                 "finish_reason": "length", "outcome": "6 3|length"})
    return str(path)


def test_clean_trace_exits_0(tmp_path, capsys):
    assert main(["replay", _trace(tmp_path / "ok.badc", PROMPT + [5], PROMPT + [6])]) == 0
    assert "0 violating calls" in capsys.readouterr().out


def test_d1_violation_names_call_prefix_expected_and_seen(tmp_path, capsys):
    assert main(["replay", _trace(tmp_path / "d1.badc", PROMPT + [5, 6, 3])]) == 1
    out = capsys.readouterr().out
    assert "processor 0 (P) at position 10" in out and "D1" in out
    assert "expected '11 ids (the logical prefix)'" in out and "unverified drafts [6, 3]" in out


def test_d3_postcheck_reading_drafts(tmp_path, capsys):
    assert main(["replay", _trace(tmp_path / "d3.badc", PROMPT + [5], PROMPT + [6, 3, 4, 5])]) == 1
    out = capsys.readouterr().out
    assert "D3" in out and "stopping re-check" in out and "unverified drafts [3, 4, 5]" in out


def test_corrupt_trace_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.badc"
    bad.write_bytes(b"not a trace at all, sorry" * 4)
    assert main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "byte 0" in err and "Traceback" not in err
