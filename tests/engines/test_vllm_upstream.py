"""findings/vllm-0.32.0/upstream/repro.py, the standalone reproducer behind the vLLM reports: it writes
badc's tiny model (so the reports' exact figures are about the same model), and on this build reports 1
and 2 still show, and vllm#55006's fix removes report 1's (`check`)."""

import json

import numpy as np
from safetensors.numpy import load_file

from badc_trace.tiny import vllm as tiny
from tests.upstream_repros import load_repro, run_check

FOLDER = "vllm-0.32.0"


def test_reproducer_writes_badcs_tiny_model(tmp_path):
    load_repro(FOLDER).write_model(tmp_path / "repro")
    tiny.write_model_dir(1, tmp_path / "badc")
    a, b = load_file(tmp_path / "repro" / "model.safetensors"), load_file(tmp_path / "badc" / "model.safetensors")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    for name in ("config.json", "tokenizer.json"):  # the same content; the files are indented differently
        repro, badc = (json.loads((tmp_path / side / name).read_text()) for side in ("repro", "badc"))
        assert repro == badc, name


def test_reports_1_and_2_still_show_on_this_build_and_the_expand_fix_removes_1(tmp_path):
    out = run_check(FOLDER, tmp_path, verdicts=2)
    assert "leaves [-5.0, -5.0, -5.0]; with vllm#55006's fix [0.7, 1.3, 1.3]" in out
    assert "without speculation there are 0 bonus rows" in out
