"""The llama.cpp build set-up makes runs on every machine of this kind: a portable instruction set (no
native flags, no AMX, whose kernel died with SIGILL on quantized models on AMX CPUs), and the quantized
SmolLM2 GGUF runs through llama-cpp-python with prompt lookup, so the suite reaches the quantized kernels."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from badc_check.builds import load_builds

BUILD = load_builds().get(os.environ.get("BADC_BUILD", "llama_cpp-0.3.36"))


def test_the_build_has_the_declared_portable_instruction_set():
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AVX2 = 1" in info and "FMA = 1" in info, info
    assert "AMX" not in info and "AVX512" not in info, info  # compiled out, whatever this CPU has


@pytest.mark.skipif(BUILD is None or "smollm2" not in BUILD.models, reason="this build does not install SmolLM2")
def test_smollm2_q4_1_runs_with_prompt_lookup():
    code = """
import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
from badc_trace.checkpoints import resolve_model
llm = llama_cpp.Llama(model_path=resolve_model("smollm2"), n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False,
                      draft_model=LlamaPromptLookupDecoding(num_pred_tokens=3))
out = [llm.create_completion("the cat the cat the", max_tokens=8, seed=s, temperature=1.0) for s in range(4)]
print("ok", sum(o["usage"]["completion_tokens"] for o in out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode} (SIGILL is -4): {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("ok ") and int(proc.stdout.split()[1]) > 0
