"""badc-trace closes every traced process's trace however the process ends: atexit, os._exit (how
multiprocessing's forked children and servers' workers end) and SIGTERM (how a parent stops them), so a
clean run replays with exit 0, not 3 for a torn tail. The toy engine: no engine build needed."""

import json
import textwrap

import pytest

from badc_check.cli import main
from badc_trace.launcher import process_traces
from tests.programs import trace_program

PROGRAM = textwrap.dedent("""
    import multiprocessing, os, signal, sys, time
    from badc_toy.engine import ToyEngine, ToyModel, rng_sampler

    def run():
        engine = ToyEngine(ToyModel(1), speculative=True, processors=[{"name": "min_tokens", "min_tokens": 2}])
        for seed in range(20):
            engine.generate([0, 1, 2, 0, 1], 5, rng_sampler(seed))

    def killed():
        run()
        print("child done", flush=True)
        time.sleep(60)

    if __name__ == "__main__":
        how = sys.argv[1]
        if how in ("fork", "killed child"):  # a forked child ends with os._exit after its target returns
            run()  # the parent's trace is open when it forks: the child must write its own
            child = multiprocessing.get_context("fork").Process(target=run if how == "fork" else killed)
            child.start()
            if how == "killed child":  # as vLLM's API server kills its engine's workers at shutdown
                time.sleep(3)
                child.kill()
            child.join()
            print("script done", child.exitcode)
            sys.exit(0)
        run()
        print("script done", flush=True)
        if how == "os._exit":
            os._exit(0)
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
""")


def _run(tmp_path, script):
    import subprocess
    import sys

    (tmp_path / "user.py").write_text(script)
    return subprocess.run([sys.executable, "-m", "badc_trace.launcher", "--out", str(tmp_path / "user.badc"), "--",
                           sys.executable, str(tmp_path / "user.py")], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("how", ["atexit", "os._exit", "sigterm", "fork", "killed child"])
def test_every_way_a_traced_process_ends_leaves_a_whole_trace(tmp_path, how, capsys):
    import sys

    script = PROGRAM.replace("sys.argv[1]", repr(how))
    if how == "sigterm":  # the program dies of the signal: badc-trace exits 128 + 15, as a shell would
        proc = _run(tmp_path, script)
        assert proc.returncode == 128 + 15 and "script done" in proc.stdout, proc.stderr
        out = tmp_path / "user.badc"
    else:
        out = trace_program(tmp_path, script, sys.executable)
    traces = process_traces(str(out))
    two = how in ("fork", "killed child")
    assert len(traces) == (2 if two else 1), traces
    assert main(["replay", str(out), "--json"]) == 0, capsys.readouterr()
    res = json.loads(capsys.readouterr().out)
    assert res["requests"] == (40 if two else 20)
    # a SIGKILLed child's trace has no end record, but its process wrote every record through
    assert res["unclosed"] == ([str(traces[1])] if how == "killed child" else []), res["unclosed"]


def test_a_killed_program_leaves_a_torn_trace_and_replay_says_so(tmp_path, capsys):
    # The program itself (badc-trace's child) buffers its records: SIGKILL loses the last second's,
    # so the replay cannot say held (exit 3), never 0.
    proc = _run(tmp_path, PROGRAM.replace("sys.argv[1]", repr("sigkill")))
    assert proc.returncode == 128 + 9 and "script done" in proc.stdout, proc.stderr
    assert main(["replay", str(tmp_path / "user.badc")]) == 3
    assert "UNCHECKED: torn tail" in capsys.readouterr().err
