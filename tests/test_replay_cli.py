"""`badc replay TRACE` on hand-made llama_cpp traces: the contract check itself, without an engine."""

import json

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


def test_a_trace_with_no_request_exits_3_saying_so(tmp_path, capsys):
    path = tmp_path / "empty.badc"
    with TraceWriter(str(path), engine="llama_cpp", build="0.3.36", config={"id": "T"}):
        pass
    assert main(["replay", str(path)]) == 3
    out, err = capsys.readouterr()
    assert "contract unchecked" in out and "UNCHECKED: no request in the trace" in err


def test_a_torn_tail_that_lost_requests_exits_3_also_with_json(tmp_path, capsys):
    path = tmp_path / "torn.badc"
    _trace(path, PROMPT + [5], PROMPT + [6])
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 5)  # the writer died inside its last frame
    assert main(["replay", str(path)]) == 3
    assert "torn tail at byte" in capsys.readouterr().err
    assert main(["replay", str(path), "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "unchecked" and out["left_unchecked"]


def test_calls_that_name_no_request_are_unchecked_and_a_violation_still_wins(tmp_path, capsys):
    path = tmp_path / "orphan.badc"
    with TraceWriter(str(path), engine="llama_cpp", build="0.3.36", config={"id": "T"}) as w:
        w.write({"type": "processor", "req": None, "proc": 0, "name": "P", "ids": PROMPT, "logical_len": 10,
                 "n_tokens": 10, "role": "verify", "state": "x"})
    assert main(["replay", str(path)]) == 3
    assert "1 record(s) name no request" in capsys.readouterr().err
    bad = _trace(tmp_path / "d1.badc", PROMPT + [5, 6, 3])
    assert main(["replay", bad, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["by_class"] == {"D1": {"calls": 1, "requests": 1}}


def test_an_arms_contract_merged_from_shards_is_held_only_when_every_shard_was_checked_in_full():
    from badc_replay.contract import merge_contracts

    held = {"status": "held", "calls": 9, "violations": 0, "requests": 3, "violating_requests": 0,
            "by_class": {}, "first_violation": None, "left_unchecked": []}
    broken = {**held, "status": "broken", "violations": 2, "violating_requests": 1,
              "by_class": {"D2": {"calls": 2, "requests": 1}}, "first_violation": {"request": 4, "message": "m"}}
    assert merge_contracts([(0, held), (3, held)])["status"] == "held"
    both = merge_contracts([(0, held), (3, broken), (6, broken)])
    assert both["status"] == "broken" and both["by_class"] == {"D2": {"calls": 4, "requests": 2}}
    assert both["requests"] == 9 and both["first_violation"]["request"] == 4
    lost = merge_contracts([(0, held), (3, {})])  # a shard that was not replayed (level counts)
    assert lost["status"] == "unchecked" and lost["left_unchecked"] == ["the shard from draw 3 was not replayed"]
    assert merge_contracts([])["status"] == "unchecked"
    # Shards written before `left_unchecked` existed: their `unchecked` and `torn_tail` still count.
    old = {k: v for k, v in held.items() if k not in ("status", "left_unchecked", "by_class")}
    assert merge_contracts([(0, old)])["status"] == "held"
    torn = merge_contracts([(0, {**old, "torn_tail": "byte 9: truncated frame"})])
    assert torn["status"] == "unchecked" and "torn tail at byte 9" in torn["left_unchecked"][0]
    part = merge_contracts([(0, {**old, "unchecked": "D2 and D3 not checked: no engine here"})])
    assert part["status"] == "unchecked" and "D2 and D3 not checked" in part["left_unchecked"][0]


def _split(src, front, core):
    """Write trace `src` as two processes' traces: requests and returns in `front`, the calls in `core`."""
    from badc_trace.format import read_trace

    reader = read_trace(src)
    h = reader.header
    with TraceWriter(front, engine=h["engine"], build=h["build"], config=h["config"]) as wf, \
            TraceWriter(core, engine=h["engine"], build=h["build"], config=h["config"]) as wc:
        for rec in reader:
            (wf if rec["type"] in ("request", "return") else wc).write(rec)


def test_one_runs_traces_are_joined_by_request_id_from_a_folder_or_file_and_its_pid_siblings(tmp_path, capsys):
    whole = _trace(tmp_path / "d1.badc", PROMPT + [5, 6, 3])
    run = tmp_path / "run"
    run.mkdir()
    _split(whole, str(run / "t.badc"), str(run / "t.4242.badc"))
    assert main(["replay", whole, "--json"]) == 1
    alone = json.loads(capsys.readouterr().out)
    for target in (run, run / "t.badc"):  # the folder, or FILE with FILE.PID.badc beside it
        assert main(["replay", str(target), "--json"]) == 1
        out, err = capsys.readouterr()
        assert "2 traces of one run, joined by request id" in err
        joined = json.loads(out)
        assert {k: joined[k] for k in ("requests", "calls", "violations", "by_class")} == \
            {k: alone[k] for k in ("requests", "calls", "violations", "by_class")}
    # either half alone: the calls without their request record, or a request whose calls are elsewhere
    assert main(["replay", str(run / "t.4242.badc")]) == 1  # the D1 violation is still found
    assert "its request record is not" in capsys.readouterr().err
    (run / "t.4242.badc").unlink()
    clean = _trace(tmp_path / "ok.badc", PROMPT + [5], PROMPT + [6])
    _split(clean, str(run / "c.badc"), str(run / "c.77.badc"))
    assert main(["replay", str(run / "c.77.badc")]) == 3
    assert "its request record is not" in capsys.readouterr().err


def test_a_folder_without_traces_and_a_missing_trace_are_usage_errors(tmp_path, capsys):
    assert main(["replay", str(tmp_path)]) == 2
    assert "no .badc trace" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "nope.badc")]) == 2
    assert "no such trace" in capsys.readouterr().err


def test_recorded_arguments_load_only_allowlisted_classes():
    # a trace is data: its recorded generate() arguments must not run code when replay loads them
    import collections
    import os
    import pickle

    import pytest

    from badc_trace import portable
    from badc_trace.engines.transformers import TransformersInstrumentor

    data = {"kwargs": {"max_new_tokens": 3, "order": collections.OrderedDict(a=1)},
            "ref": portable.Ref("model", "/models/x", "float32")}
    assert portable.loads(portable.dumps(data)) == data

    class Evil:
        def __reduce__(self):
            return os.system, ("echo pwned",)

    with pytest.raises(portable.NotPortable, match="posix.system|os.system"):
        portable.loads(pickle.dumps(Evil()))
    with pytest.raises(portable.NotPortable, match="builtins.eval"):
        portable.loads(pickle.dumps(eval))
    with pytest.raises(portable.NotPortable):
        portable.dumps(lambda: 0)
    # Hand-made pickles that an allowlist of module prefixes let through (a trace is data: each would run
    # code): a dotted name reaching os from an allowed module, torch's storage loader (a nested torch.load
    # without restrictions), numpy's loader, a memmap (opens and truncates a file), a function of transformers.
    for module, name in (("torch", "os.system"), ("numpy", "os.system"), ("torch.storage", "_load_from_bytes"),
                         ("torch", "load"), ("numpy", "load"), ("numpy", "memmap"),
                         ("transformers.generation.utils", "os.system"), ("collections", "namedtuple"),
                         ("transformers.dynamic_module_utils", "get_class_from_dynamic_module")):
        blob = b"\x80\x04\x8c" + bytes([len(module)]) + module.encode() + b"\x8c" + bytes([len(name)]) + \
            name.encode() + b"\x93\x8c\x04echo\x85R."  # STACK_GLOBAL module.name, then call it with ("echo",)
        for allow in (portable.PLAIN, TransformersInstrumentor.portable_allowlist):  # the engine's widens it
            with pytest.raises(portable.NotPortable, match="a trace is data|No module named"):  # torch not here
                portable.loads(blob, allow)
    # an engine's classes load only with that engine's allowlist, which its probe declares
    from collections import OrderedDict

    blob = portable.dumps({"x": OrderedDict(a=1)})
    allowed = pickle.dumps(portable.Allowlist(class_prefixes=("badc_trace.portable",)))
    assert portable.loads(blob) == {"x": OrderedDict(a=1)}
    with pytest.raises(portable.NotPortable, match="badc_trace.portable.Allowlist.*no engine module"):
        portable.loads(allowed)
    assert portable.loads(allowed, portable.Allowlist(class_prefixes=("badc_trace.portable",))) == \
        portable.Allowlist(class_prefixes=("badc_trace.portable",))


def test_diff_takes_a_runs_trace_set_like_replay(tmp_path, capsys):
    faulty = _trace(tmp_path / "d1.badc", PROMPT + [5, 6, 3])
    run = tmp_path / "run"
    run.mkdir()
    _split(faulty, str(run / "t.badc"), str(run / "t.99.badc"))
    clean = _trace(tmp_path / "ok.badc", PROMPT + [5], PROMPT + [6])
    assert main(["diff", faulty, clean]) == 0
    alone = capsys.readouterr().out
    assert main(["diff", str(run), clean]) == 0  # the folder joined by request id: the same divergence
    joined = capsys.readouterr().out
    assert "differs in `n_tokens`" in joined
    assert joined.split("\n", 3)[3] == alone.split("\n", 3)[3]  # all but the line naming side A
    assert main(["diff", str(tmp_path / "missing"), clean]) == 2


def test_replay_never_runs_a_program_the_trace_names(tmp_path, capsys):
    """A trace is data: a header naming an interpreter (badc-trace records the traced program's, `python`)
    for a build not set up here is never run; replay says which build it needs and leaves D2/D3 unchecked."""
    marker = tmp_path / "ran"
    program = tmp_path / "program"
    program.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    program.chmod(0o755)
    path = tmp_path / "t.badc"
    with TraceWriter(path, engine="transformers", build="9.9.9",
                     config={"argv": ["x.py"], "python": str(program), "level": "full"}) as w:
        w.write({"type": "request", "req": 0, "prompt": [1, 2], "params": {}})
        w.write({"type": "return", "req": 0, "tokens": [3], "outcome": "3|length"})
    assert main(["replay", str(path)]) == 3
    err = capsys.readouterr().err
    assert not marker.exists()
    assert "needs engine build transformers-9.9.9" in err and "UNCHECKED" in err
