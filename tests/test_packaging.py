"""The wheel holds every module: packages are found from pyproject.toml's [tool.setuptools.packages.find]
(a hand-kept list once left a new subpackage silently out of the wheel)."""

import tomllib
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parents[1]


def test_every_folder_of_python_modules_is_a_package_of_the_wheel():
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set(setuptools.find_namespace_packages(str(ROOT), include=find["include"], exclude=find["exclude"]))
    roots = [p.parent.name for p in ROOT.glob("badc_*/__init__.py")]  # every package of the checkout
    folders = {str(p.parent.relative_to(ROOT)).replace("/", ".")
               for root in roots for p in (ROOT / root).rglob("*.py") if "__pycache__" not in p.parts}
    patches = {f for f in folders  # package data: loaded by path
               if f.startswith("badc_replay.patches") or f.startswith("badc_toy.repairs")}
    assert patches, "the frozen repairs moved: update this test"
    assert folders - patches <= found, sorted(folders - patches - found)
    assert not found & patches
