"""An engine outside badc, installed with pip, runs `badc run` end to end with no edit to badc (issue 49):
its engine, probe, builds, repairs and tiny models are found through its own package's entry points
(docs/engines/protocol.md, "An engine outside badc").

The engine here is the toy engine under another name, so that what is tested is the plumbing: nothing
of `coin` is known to badc until the package is installed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

# what its pyproject.toml would declare as [project.entry-points."badc.*"]
ENTRY_POINTS = """
[badc.engines]
coin = coin_engine:ENGINE

[badc.probes]
coin = coin_engine.probe:CoinInstrumentor

[badc.builds]
coin = coin_engine:BUILDS

[badc.repairs]
coin = coin_engine:REPAIRS

[badc.tiny]
coin = coin_engine.tiny
"""

PACKAGE = {
    "coin_engine/__init__.py": """
        from pathlib import Path

        from badc_toy.replay import ToyEngineAdapter

        HERE = Path(__file__).parent
        BUILDS = HERE / "builds.toml"  # its builds, beside badc's own
        REPAIRS = HERE / "patches"  # its repairs: patches/NAME/intervention.py, named coin/NAME


        class CoinEngine(ToyEngineAdapter):
            name = "coin"
            package = "coin-engine"


        ENGINE = CoinEngine()
    """,
    "coin_engine/probe.py": """
        from badc_toy.probe import ToyInstrumentor


        class CoinInstrumentor(ToyInstrumentor):
            engine = "coin"
            package = "coin-engine"
            supported = ">=0.1"
    """,
    "coin_engine/tiny.py": """
        # its tiny models (`model = "tiny"`): the toy's bigram tables
        from badc_toy.tiny import DEFAULT_SEED, VOCAB, first_step_distribution  # noqa: F401
    """,
    "coin_engine/builds.toml": """
        [builds."coin-0.1.0"]
        engine = "coin"
        version = "0.1.0"
        main = true  # runs in badc's own environment, where the package is installed
        requirements = []
    """,
    "coin_engine/patches/logical-rows/intervention.py": """
        REPAIR_ID = "coin/logical-rows"


        def apply(engine):
            before = engine.defects
            engine.defects = before - {"D1", "D2", "D3"}
            return lambda: setattr(engine, "defects", before)
    """,
}

CAMPAIGN = """
[campaign]
name = "coin"
draws = 4000
confirm_draws = 110000  # this family's bound on a repaired arm with no witness is below 1e-4 from 104,000
confirm_anytime = true  # the unrepaired arm stops at the first look where it recurs
shard = 27500
seed = 3

[defaults]
engine = "coin"
build = "0.1.0"

[[config]]
id = "NEG"
role = "negative-control"
processors = [{ name = "min_tokens", min_tokens = 3 }]
predicates = ["min_tokens"]

[[config]]
id = "D1"
processors = [{ name = "min_tokens", min_tokens = 3 }]
defects = ["D1"]
hypothesis = "H-D1"
predicates = ["min_tokens"]
repair = "coin/logical-rows"
"""


def _wheel(src: Path, out: Path) -> Path:
    """The package as a wheel, made by hand (a zip with its metadata and RECORD): no build backend, which
    the environment may lack, and nothing fetched."""
    dist = "coin_engine-0.1.0.dist-info"
    files = {p.relative_to(src).as_posix(): p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()}
    files[f"{dist}/METADATA"] = b"Metadata-Version: 2.1\nName: coin-engine\nVersion: 0.1.0\n"
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: badc-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist}/entry_points.txt"] = ENTRY_POINTS.encode()
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + f"{dist}/RECORD,,\n"
    path = out / "coin_engine-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in [*files.items(), (f"{dist}/RECORD", record.encode())]:
            z.writestr(name, data)
    return path


def test_an_engine_installed_with_pip_runs_a_campaign_with_a_repair_confirmed(tmp_path):
    src, site = tmp_path / "coin-engine", tmp_path / "site"
    for name, text in PACKAGE.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(textwrap.dedent(text).lstrip())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(_wheel(src, tmp_path))], check=True, capture_output=True)
    (tmp_path / "coin.toml").write_text(CAMPAIGN)
    env = {**os.environ, "PYTHONPATH": str(site)}  # the package is installed there, for badc and its workers
    badc = Path(sys.executable).with_name("badc")

    run = subprocess.run([str(badc), "run", str(tmp_path / "coin.toml"), "--out", str(tmp_path / "out"),
                          "--no-plots"], env=env, capture_output=True, text=True)

    assert run.returncode == 1, run.stderr[-3000:]  # a FAILS: exit 1
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    by_id = {c["id"]: c for c in report["configs"]}
    neg, d1 = by_id["NEG"], by_id["D1"]
    assert neg["decision"] == "NOT_REJECTED" and neg["contract"]["status"] == "held"  # drawn, traced, replayed
    assert d1["decision"] == "FAILS" and d1["contract"]["status"] == "broken" and d1["engine"] == "coin"
    assert d1["repair"]["confirmed"] is True and d1["repair"]["id"] == "coin/logical-rows", d1["repair"]
    assert json.loads((tmp_path / "out" / "seal.json").read_text())["seal"] == report["seal"]
    assert list((tmp_path / "out" / "traces" / "D1").glob("on-*.badc"))
    # without the package, the same campaign is refused before anything is sealed, naming what is missing
    bare = subprocess.run([str(badc), "run", str(tmp_path / "coin.toml"), "--out", str(tmp_path / "bare")],
                          capture_output=True, text=True)
    assert bare.returncode == 2 and "unknown engine 'coin'" in bare.stderr and not (tmp_path / "bare").exists()
