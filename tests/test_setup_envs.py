"""tools/setup_envs.py refuses, before installing anything, when the environments will not fit on disk."""

import importlib.util
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from badc_check.builds import load_builds

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("setup_envs", ROOT / "tools" / "setup_envs.py")
setup_envs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(setup_envs)

Usage = namedtuple("Usage", "total used free")


def _free(monkeypatch, gb: float) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: Usage(300e9, 300e9 - gb * 1e9, gb * 1e9))


def test_shortfall_names_the_environments_and_the_figures(monkeypatch, tmp_path):
    _free(monkeypatch, 2.0)
    msg = setup_envs.disk_shortfall({".venv": 0.8, "vllm-0.32.0": 3.7}, tmp_path)
    assert msg is not None
    assert "2.0 GB free" in msg and str(tmp_path) in msg
    assert ".venv, vllm-0.32.0" in msg and "about 5.5 GB" in msg
    _free(monkeypatch, 5.5)
    assert setup_envs.disk_shortfall({".venv": 0.8, "vllm-0.32.0": 3.7}, tmp_path) is None
    _free(monkeypatch, 0.0)
    assert setup_envs.disk_shortfall({}, tmp_path) is None  # nothing to install needs no space


def test_every_build_declares_its_size():
    assert all(b.disk_gb > 0 for b in load_builds().values() if not b.main)  # main: runs in .venv


def test_main_refuses_before_creating_anything(monkeypatch, capsys):
    missing = [b for b in load_builds().values() if not b.venv.exists()]
    if not missing:
        pytest.skip("every declared build is set up here")
    build = missing[0]
    _free(monkeypatch, 0.1)

    def no_install(name, *a, **k):  # a broken check fails here, not after a real pip install
        raise AssertionError(f"{name} was installed despite the shortfall")

    monkeypatch.setattr(setup_envs, "make_env", no_install)
    assert setup_envs.main(["--no-default", "--builds", build.name]) == 1
    err = capsys.readouterr().err
    assert "0.1 GB free" in err and build.name in err
    assert not build.venv.exists()


def test_a_stale_environment_needs_only_the_headroom(monkeypatch, capsys, tmp_path):
    """A changed pyproject.toml makes every environment stale; pip then updates them in place, so a
    nearly full disk must not be refused for their whole size."""
    build = next(b for b in load_builds().values() if not b.main)
    monkeypatch.setattr(setup_envs, "is_current", lambda *a, **k: False)
    monkeypatch.setattr(setup_envs, "make_env", lambda *a, **k: 0.0)
    monkeypatch.setattr(type(build), "venv", property(lambda b: tmp_path / b.name))
    monkeypatch.setattr(setup_envs, "ROOT", tmp_path)
    (tmp_path / ".venv").mkdir()
    (tmp_path / build.name).mkdir()
    _free(monkeypatch, setup_envs.HEADROOM_GB + 0.05)
    assert setup_envs.main(["--no-default", "--builds", build.name]) == 0
    (tmp_path / build.name).rmdir()  # a missing one needs its whole size
    assert setup_envs.main(["--no-default", "--builds", build.name]) == 1
    err = capsys.readouterr().err
    assert f"setting up .venv, {build.name} needs about {build.disk_gb + setup_envs.HEADROOM_GB:.1f} GB" in err
