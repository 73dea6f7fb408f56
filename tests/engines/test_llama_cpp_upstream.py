"""findings/llama_cpp-0.3.36/upstream/repro.py, the standalone reproducer behind the llama-cpp-python
reports: it writes badc's tiny model byte for byte (so the reports' exact figures are about the same
model), and on this build every report's defect still shows and each fix removes its own (`check`)."""

from badc_trace.tiny import llama_cpp as tiny
from tests.upstream_repros import load_repro, run_check

FOLDER = "llama_cpp-0.3.36"


def test_reproducer_writes_badcs_tiny_model_byte_for_byte(tmp_path, monkeypatch):
    monkeypatch.setenv("BADC_CACHE", str(tmp_path / "cache"))
    load_repro(FOLDER).write_model(tmp_path / "repro.gguf")
    assert (tmp_path / "repro.gguf").read_bytes() == tiny.model_path(tiny.DEFAULT_SEED).read_bytes()


def test_every_report_still_shows_on_this_build_and_the_fixes_remove_theirs(tmp_path):
    out = run_check(FOLDER, tmp_path, verdicts=6)
    # The figures the reports quote at check's 2,000 requests: none of the defects in the
    # speculation-off arm or with the fix, and the control coupled draw for draw.
    assert "the output differs with and without prompt lookup in 0;" in out
    assert "with the fix (llama.py.diff) applied at run time: 0." in out
    assert "speculation off 0, on 73, on with the fix 0 (of 2,000)" in out
    assert "speculation off 0, on 15, on with the proposed fix 0 (of 2,000)" in out
