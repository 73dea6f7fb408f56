"""Damaged and forged traces: never a verdict on lost or forged evidence, never a traceback.

Each case rewrites a committed finding's trace through the reference writer (so every chunk, sync and end
record is valid) with one change to what replay reads; replay must refuse it (exit 2, naming the byte
offset, record and field) or leave it unchecked (exit 3), never exit 0 or 1 on it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badc_check.cli import main
from badc_trace.format import TraceWriter, read_trace

ROOT = Path(__file__).resolve().parents[1]
VLLM = ROOT / "findings/vllm-0.32.0/VLLM-1-on.badc"  # 40 requests, 86 violating calls (D2 draft temperatures)
LLAMA = ROOT / "findings/llama_cpp-0.3.36/LCP-2-on.badc"


def rewrite(src: Path, dst: Path, record=lambda r: r, engine: str | None = None) -> Path:
    reader = read_trace(src)
    h = reader.header
    with TraceWriter(dst, engine=engine or h["engine"], build=h["build"], config=h["config"], seal=h["seal"]) as w:
        for rec in reader:
            for out in record(dict(rec)) or ():
                w.write(out)
    return dst


def one(fn):
    return lambda r: [fn(r)]


def _nan_temperatures(r):
    if r["type"] == "step" and r["verify_temperature"]:
        r["verify_temperature"] = [math.nan] * len(r["verify_temperature"])
    return r


CASES = {
    "vllm NaN draft temperatures": (VLLM, one(_nan_temperatures), None, "verify_temperature"),
    "vllm NaN request temperature": (VLLM, one(lambda r: {**r, "params": {**r["params"], "temperature": math.nan}}
                                               if r["type"] == "request" else r), None, "'temperature'"),
    "vllm relabelled toy": (VLLM, one(lambda r: r), "toy", "not a record of engine 'toy'"),
    "vllm relabelled llama_cpp": (VLLM, one(lambda r: r), "llama_cpp", "field 'api' is missing"),
    "llama relabelled transformers": (LLAMA, one(lambda r: r), "transformers", "engine 'transformers'"),
    "llama missing field": (LLAMA, one(lambda r: {k: v for k, v in r.items() if k != "logical_len"}
                                       if r["type"] == "processor" else r), None, "field 'logical_len' is missing"),
    "llama mistyped ids": (LLAMA, one(lambda r: {**r, "ids": "1 2 3"} if r["type"] == "processor" else r), None,
                           "field 'ids' must be a list of token ids"),
    "llama string request id": (LLAMA, one(lambda r: {**r, "req": str(r["req"])} if r["type"] == "sample" else r),
                                None, "field 'req'"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_forged_field_or_engine_is_a_format_error_naming_it(tmp_path, capsys, name):
    src, fn, engine, fragment = CASES[name]
    path = rewrite(src, tmp_path / "m.badc", fn, engine)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "byte " in err and "record " in err, err


def test_the_unmutated_rewrite_keeps_its_verdict(tmp_path, capsys):
    assert main(["replay", "--json", str(rewrite(VLLM, tmp_path / "same.badc", one(lambda r: r)))]) == 1
    assert '"violations": 86' in capsys.readouterr().out


def test_an_early_end_or_lost_requests_never_pass(tmp_path, capsys):
    """Records after an end record, or a trace cut to one request, are never read as complete evidence."""
    reader = read_trace(VLLM)
    records = list(reader)
    h = reader.header
    path = tmp_path / "early.badc"
    with TraceWriter(path, engine=h["engine"], build=h["build"], config=h["config"], seal=h["seal"]) as w:
        for rec in records[:5]:
            w.write(rec)
    with open(path, "ab") as f:  # what followed the early end: a second run's chunks appended
        f.write(rewrite(VLLM, tmp_path / "tail.badc").read_bytes())
    assert main(["replay", str(path)]) == 2
    assert "after the end record" in capsys.readouterr().err


# -- a seeded slice of tools/fuzz_inputs.py, every mutation kind, cheap enough for CI ----------------------

def _fuzz():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz_inputs", ROOT / "tools" / "fuzz_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_seeded_slice_of_the_fuzz_harness_meets_its_targets(tmp_path, monkeypatch):
    """60 trace, 40 counts and 20 campaign mutations (tools/fuzz_inputs.py runs 2,000 / 300 / 100): no
    traceback, no exit 4, no hang, no exit 0 on a trace whose evidence changed."""
    import random

    fuzz = _fuzz()
    monkeypatch.setenv("BADC_CRASH_DIR", str(tmp_path / "crash"))
    bad: list[str] = []
    rng = random.Random(20261205)
    traces = fuzz.fuzz_traces(60, rng, tmp_path, 60.0, bad)
    counts = fuzz.fuzz_counts(40, rng, tmp_path, 60.0, bad)
    campaigns = fuzz.fuzz_campaigns(20, rng, tmp_path, 60.0, bad)
    assert not bad, bad
    assert traces["2"] > 30 and counts["2"] > 20 and campaigns["2"] > 10  # the mutations do reach the checks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_any_trace_mutation_is_refused_unchecked_or_unchanged(tmp_path_factory, seed):
    import random

    fuzz = _fuzz()
    tmp = tmp_path_factory.mktemp("fuzz")
    bad: list[str] = []
    fuzz.fuzz_traces(1, random.Random(seed), tmp, 60.0, bad)
    assert not bad, bad
