"""The engine protocol: the registry (built-in engines and entry points), strict configs with errors that
name the file, config, key and nearest valid key, probes in OpenTelemetry's shape, package data."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from badc_check.campaign import CampaignError, load_campaign
from badc_check.counts_io import CountsError, load_counts
from badc_replay.engine import CAPABILITIES, ConfigError, Engine
from badc_replay.registry import UnknownEngineError, engine_names, get_engine
from badc_trace.instrument import BaseInstrumentor, UnsupportedVersionError
from badc_trace.registry import UnknownProbeError, probe_class

ROOT = Path(__file__).resolve().parents[1]

# The issue's typos: a top-level key, a drafter key and a sampling key, each one letter off.
TYPOS = """
[campaign]
draws = 1000

[defaults]
engine = "llama_cpp"
build = "0.3.36"

[[config]]
id = "T1"
max_new_token = 8
drafter = { method = "prompt_lookup", num_pred_token = 3 }
sampling = { temperatur = 1.0 }

[[config]]
id = "T2"
hypothesis = "H-D1-phis"
repair = "llama_cpp/logical-prefx"
role = "probes"

[[config]]
id = "T3"
applied = ["vllm/cpu-expand", "llama_cpp/logical-prefix"]
repair = "llama_cpp/logical-prefix"

[[config]]
id = "T4"
applied = "llama_cpp/logical-prefix"
"""


def test_builtin_engines_are_registered_under_their_names_and_unknown_ones_get_the_nearest():
    assert {"transformers", "llama_cpp", "vllm"} <= set(engine_names())
    for name in ("transformers", "llama_cpp", "vllm"):
        engine = get_engine(name)
        assert isinstance(engine, Engine) and engine.name == name
        assert probe_class(name).engine == name  # the same name in every layer
    with pytest.raises(UnknownEngineError, match="did you mean 'llama_cpp'"):
        get_engine("llama_cp")
    with pytest.raises(UnknownProbeError, match="did you mean 'vllm'"):
        probe_class("vlm")


def test_an_out_of_tree_engine_and_probe_are_found_through_entry_points(tmp_path, monkeypatch):
    (tmp_path / "fake_engine_mod.py").write_text(textwrap.dedent("""
        from badc_replay.engine import Engine, strict
        from badc_trace.instrument import BaseInstrumentor

        @strict
        class FakeConfig:
            id: str
            width: int = 2

        class FakeEngine(Engine):
            name = "fake"
            package = "fake-engine"
            config_class = FakeConfig

            def harness(self, cfg, speculative):
                raise NotImplementedError

            def reference_law(self, cfg):
                raise NotImplementedError

            def check_request(self, records, config, context=None):
                return []

        class FakeInstrumentor(BaseInstrumentor):
            engine, package, supported = "fake", "fake-engine", ">=1"

            def _instrument(self, sink):
                pass

        ENGINE = FakeEngine()
    """))
    dist = tmp_path / "fake_engine-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-engine\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[badc.engines]\nfake = fake_engine_mod:ENGINE\n\n"
                                           "[badc.probes]\nfake = fake_engine_mod:FakeInstrumentor\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    get_engine.cache_clear()
    try:
        engine = get_engine("fake")
        assert engine.name == "fake" and "fake" in engine_names()
        assert engine.parse_config({"id": "F", "engine": "fake", "build": "1.0", "width": 3}).width == 3
        with pytest.raises(ConfigError, match=r"unknown key 'widht' \(did you mean 'width'\?\)"):
            engine.parse_config({"id": "F", "widht": 3})
        assert probe_class("fake").__name__ == "FakeInstrumentor"
        assert type(engine.probe()).__name__ == "FakeInstrumentor"
    finally:
        get_engine.cache_clear()


def test_every_typo_of_a_campaign_is_refused_before_anything_is_sealed(tmp_path):
    path = tmp_path / "typos.toml"
    path.write_text(TYPOS)
    with pytest.raises(CampaignError) as e:
        load_campaign(path)
    lines = str(e.value).splitlines()
    assert all(line.startswith(f"{path}: config T") for line in lines)
    text = str(e.value)
    for expected in ["config T1: unknown key 'max_new_token' (did you mean 'max_new_tokens'?)",
                     "config T1: unknown key 'drafter.num_pred_token' (did you mean 'num_pred_tokens'?)",
                     "config T1: unknown key 'sampling.temperatur' (did you mean 'temperature'?)",
                     "config T2: key 'hypothesis': llama_cpp has no hypothesis 'H-D1-phis' (did you mean 'H-D1-phys'?)",
                     "config T2: key 'repair': no frozen repair 'llama_cpp/logical-prefx' for engine llama_cpp "
                     "(did you mean 'llama_cpp/logical-prefix'?)",
                     # a repair applied to both arms must be the config's engine's, once, and not its `repair`
                     "config T3: key 'applied': no frozen repair 'vllm/cpu-expand' for engine llama_cpp",
                     "config T3: key 'applied': each frozen repair at most once, and not the config's `repair` too",
                     "config T4: key 'applied': Input should be a valid list",
                     "config T2: key 'role': Input should be 'probe', 'negative-control' or 'positive-control'"]:
        assert expected in text
    # From the command line: exit 2, the same lines, no traceback, and no folder made or sealed.
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "badc_check.cli", "run", str(path), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "did you mean 'num_pred_tokens'?" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.parametrize("text, message", [
    ('[campaign]\ndraw = 10\n', r"\[campaign\]: unknown key 'draw' \(did you mean 'draws'\?\)"),
    ('[campaign]\nalpha = 1.5\n', r"\[campaign\]: key 'alpha': Input should be less than 1"),
    ('[campain]\n', r"unknown table \[campain\] \(did you mean 'campaign'\?\)"),
    ('[defaults]\nengine = "vllm"\nbuild = "0.32.0"\nmax_new_tokens = 0\n[[config]]\nid = "V"\n',
     r"config V: key 'max_new_tokens': Input should be greater than or equal to 1 \(got 0\) \(set in \[defaults\]\)"),
    ('[[config]]\nid = "V"\nengine = "vllm"\nbuild = "0.32.0"\ndrafter = { method = "eagle" }\n',
     r"config V: key 'drafter.method': Input should be 'ngram' \(got 'eagle'\)"),
    ('[[config]]\nid = "H"\nengine = "transformers"\nbuild = "5.24.0"\nprocessors = [{ name = "xgr" }]\n',
     r"config H: key 'processors.0.name': Input should be 'xgrammar'"),
    ('[[config]]\nid = "L"\nengine = "llama_cpp"\nbuild = "0.3.36"\nprocessors = [{ name = "min_tokens" }]\n',
     r"config L: key 'processors.0.min_tokens' is required"),
    ('[[config]]\nid = "L"\nengine = "llama_cpp"\nbuild = "0.3.36"\npredicates = ["allowed"]\n',
     r"config L: key 'predicates': llama_cpp has no predicate 'allowed' \(did you mean 'allowed_tokens'\?\)"),
])
def test_wrong_keys_types_and_ranges_are_refused_naming_them(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text if "[[config]]" in text else text + '[[config]]\nid = "X"\nengine = "vllm"\nbuild = "1"\n')
    with pytest.raises(CampaignError, match=message):
        load_campaign(path)


def test_every_shipped_campaign_validates():
    for path in sorted((ROOT / "badc_check" / "campaigns").glob("*.toml")):
        assert load_campaign(path).configs, path


def test_a_counts_file_with_a_misspelled_key_is_refused_naming_the_nearest(tmp_path):
    path = tmp_path / "counts.json"
    path.write_text(json.dumps({"alpha": 0.05, "configs": [{"id": "A", "on": {"|eos": 1}, "off": {"|eos": 1},
                                                            "refrence": {"|eos": 1.0}}]}))
    with pytest.raises(CountsError, match=r"configs\[0\]\.refrence: unknown key 'refrence' \(did you mean "
                                          r"'reference'\?\)"):
        load_counts(path)
    path.write_text(json.dumps({"alpah": 0.05, "configs": []}))
    with pytest.raises(CountsError, match=r"alpah: unknown key 'alpah' \(did you mean 'alpha'\?\)"):
        load_counts(path)


class _Owner:
    @staticmethod
    def first(x):
        return x

    @staticmethod
    def second(x):
        return x


class _Probe(BaseInstrumentor):
    engine, package, supported = "probe-test", "probe-test", ">=0.32,<0.33"
    version_here = "0.32.1"
    fail_second = False

    def installed_version(self):
        return self.version_here

    def _instrument(self, sink):
        self._wrap(_Owner, "first", lambda wrapped, inst, args, kw: wrapped(*args, **kw) + 1)
        if self.fail_second:
            raise RuntimeError("cannot patch second")
        self._wrap(_Owner, "second", lambda wrapped, inst, args, kw: wrapped(*args, **kw) + 1)


def test_probes_compare_versions_as_pep_440_and_leave_nothing_patched():
    probe = _Probe()
    originals = (_Owner.__dict__["first"], _Owner.__dict__["second"])
    assert probe.instrumentation_dependencies() == ("probe-test>=0.32,<0.33",)
    for v, ok in (("0.32.0", True), ("0.32.1rc1", True), ("0.32.0rc1", False), ("0.33.0", False), ("junk", False)):
        probe.version_here = v
        if ok:
            assert probe.check_version() == v
        else:
            with pytest.raises(UnsupportedVersionError, match=f"probe-test {v} is not supported"):
                probe.check_version()
    probe.version_here = "0.32.1"
    probe.instrument()
    probe.instrument()  # idempotent
    assert probe.is_instrumented and _Owner.first(1) == 2 and _Owner.second(1) == 2
    probe.uninstrument()
    probe.uninstrument()
    assert not probe.is_instrumented and (_Owner.__dict__["first"], _Owner.__dict__["second"]) == originals
    # A patch that fails: the ones before it are undone and the probe is not marked instrumented.
    probe.fail_second = True
    with pytest.raises(RuntimeError, match="cannot patch second"):
        probe.instrument()
    assert not probe.is_instrumented and (_Owner.__dict__["first"], _Owner.__dict__["second"]) == originals
    assert _Owner.first(1) == 1


def test_campaigns_and_repairs_ship_in_the_wheel(tmp_path):
    """Built as a wheel and installed in a fresh venv (no dependencies needed to find the files)."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(wheels), str(ROOT)], check=True, capture_output=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    wheel = next(wheels.glob("badc-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "-q", str(wheel)], check=True, capture_output=True)
    probe = textwrap.dedent("""
        from importlib.resources import files
        campaigns = files("badc_check") / "campaigns"
        patches = files("badc_replay") / "patches"
        print(sorted(p.name for p in campaigns.iterdir() if p.name.endswith(".toml")))
        print((campaigns / "paper" / "hf.toml").is_file(), (patches / "llama_cpp" / "logical-prefix" /
              "intervention.py").is_file(), (patches / "vllm" / "cpu-expand" / "README.md").is_file())
        print(files("badc_check").joinpath("campaigns").__fspath__().startswith(__import__("sys").prefix))
        # what the entry points declare (package form), found without importing the engines' modules
        from importlib.metadata import entry_points
        from importlib.util import find_spec
        from pathlib import Path
        top = lambda v: Path(list(find_spec(v.split(".")[0]).submodule_search_locations)[0])  # not imported
        where = lambda v: top(v).joinpath(*v.split(".")[1:])
        print(sorted(e.name for e in entry_points(group="badc.builds") if (where(e.value) / "builds.toml").is_file()),
              sorted(e.name for e in entry_points(group="badc.repairs")
                     if any(where(e.value).glob("*/intervention.py"))))
    """)
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                         check=True).stdout.splitlines()
    assert "builtin.toml" in out[0] and "paper.toml" in out[0]
    assert out[1] == "True True True" and out[2] == "True"  # read from the installed wheel, not the checkout
    engines = ["llama_cpp", "toy", "transformers", "vllm"]
    assert out[3] == f"{engines} {engines}"


def test_engine_native_keywords_are_judged_by_the_installed_build_before_the_seal(tmp_path):
    """`generate()` keywords and `SamplingParams` fields only the engine knows: each build is asked."""
    from badc_check.builds import load_builds
    from badc_check.campaign import run_campaign

    builds = load_builds()
    needed = {"transformers-5.24.0": '{ guidance_scal = 1.5 }', "vllm-0.32.0": '{ min_token = 3 }'}
    if not all(builds.get(b) is not None and builds[b].installed for b in needed):
        pytest.skip(f"needs the builds {', '.join(needed)} set up")
    path = tmp_path / "native.toml"
    path.write_text('[campaign]\ndraws = 100\n\n'
                    '[[config]]\nid = "H"\nengine = "transformers"\nbuild = "5.24.0"\n'
                    f'generation = {needed["transformers-5.24.0"]}\n\n'
                    '[[config]]\nid = "V"\nengine = "vllm"\nbuild = "0.32.0"\n'
                    f'sampling = {needed["vllm-0.32.0"]}\n')
    out = tmp_path / "out"
    with pytest.raises(CampaignError) as e:
        run_campaign(load_campaign(path), out, log=lambda m: None, plots=False)
    text = str(e.value)
    assert (f"{path}: config H: unknown key 'generation.guidance_scal' for transformers 5.24.0's generate() "
            "(did you mean 'guidance_scale'?)") in text
    assert (f"{path}: config V: unknown key 'sampling.min_token' for vllm 0.32.0's SamplingParams "
            "(did you mean 'min_tokens'?)") in text
    assert not (out / "seal.json").exists()


def test_a_worker_result_with_a_missing_or_mistyped_key_is_an_error_naming_the_file_and_key(tmp_path):
    from badc_replay.results import LawsResult, ResultError, ShardResult, read_result

    shard = {"id": "A", "arm": "on", "start": 0, "count": 2, "outcomes": {"|eos": 2}, "proposed": 0, "accepted": 0,
             "violations": 0, "contract": None, "records": None, "counters": {}, "resumed": 0, "elapsed_s": 0.5}
    path = tmp_path / "on-0.json"
    path.write_text(json.dumps(shard))
    assert read_result(path, ShardResult) == shard
    path.write_text(json.dumps({k: v for k, v in shard.items() if k != "outcomes"}))
    with pytest.raises(ResultError, match=rf"{path}: key 'outcomes' is required"):
        read_result(path, ShardResult)
    path.write_text(json.dumps({**shard, "count": "2"}))
    with pytest.raises(ResultError, match=r"key 'count': Input should be a valid integer"):
        read_result(path, ShardResult)
    path.write_text('{"id": "A", "build"')  # torn
    with pytest.raises(ResultError, match="not a readable result"):
        read_result(path, LawsResult)


def test_the_keys_badc_reads_itself_are_the_ones_engines_leave_out():
    import dataclasses

    from badc_check.campaign.spec import ConfigKeys
    from badc_replay.engine import CAMPAIGN_KEYS

    assert {f.name for f in dataclasses.fields(ConfigKeys)} == set(CAMPAIGN_KEYS)


def test_the_protocol_document_lists_exactly_the_public_members_of_engine():
    # docs/engines/protocol.md drifted from Engine once (refusal, enumerable missing): the member table
    # is held equal to the class, both ways.
    import re

    doc = (ROOT / "docs" / "engines" / "protocol.md").read_text()
    table = doc.split("## `Engine`", 1)[1].split("\nRules every engine keeps", 1)[0]
    caps = {f"`{cap.__name__}`" for cap in CAPABILITIES}
    documented = {name for row in table.splitlines() if row.startswith("| `")
                  for name in re.findall(r"`(\w+)(?:\([^`]*\))?`",
                                         row.split("|")[2 if row.split("|")[1].strip() in caps else 1])}
    members = {n for cls in Engine.__mro__ if cls is not object
               for n in [*vars(cls), *getattr(cls, "__annotations__", {})] if not n.startswith("_")}
    assert documented == members, {"not documented": sorted(members - documented),
                                   "documented, not in Engine": sorted(documented - members)}
    # each optional member in its capability's rows
    for cap in CAPABILITIES:
        rows = [row for row in table.splitlines() if row.startswith(f"| `{cap.__name__}` |")]
        named = {name for row in rows for name in re.findall(r"`(\w+)(?:\([^`]*\))?`", row.split("|")[2])}
        assert named == {n for n in vars(cap) if not n.startswith("_")}, cap.__name__


def test_an_engine_that_does_not_keep_the_protocol_is_refused_when_registered(tmp_path, monkeypatch):
    # As pluggy checks hooks: a misspelled override (silently ignored otherwise), an override with other
    # parameters, an override of a registry's final lookup, and a registry entry that is no implementation
    # are each named.
    (tmp_path / "bad_engine_mod.py").write_text(textwrap.dedent("""
        from badc_replay.engine import Engine, strict

        @strict
        class BadConfig:
            id: str

        class BadEngine(Engine):
            name, package, config_class = "bad", "bad-engine", BadConfig
            predicates = {"too_long": "not a function"}

            def harness(self, cfg, speculative):
                raise NotImplementedError

            def reference_law(self, cfg):
                raise NotImplementedError

            def check_request(self, records, config, context=None):
                return []

            def check_nativ(self, cfg):
                return []

            def refusal(self, config):
                return None

            def predicate(self, name, cfg):
                return lambda y: False

        ENGINE = BadEngine()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import badc_replay.registry as registry

    monkeypatch.setattr(registry, "engine_paths", lambda: {"bad": "bad_engine_mod:ENGINE"})
    get_engine.cache_clear()
    try:
        with pytest.raises(UnknownEngineError) as e:
            get_engine("bad")
    finally:
        get_engine.cache_clear()
    message = str(e.value)
    assert "does not keep the engine protocol" in message
    assert "BadEngine.check_nativ is not a member of the protocol (did you mean 'check_native'?)" in message
    assert "BadEngine.refusal(self, config): the protocol's parameters are (self, cfg)" in message
    assert ("BadEngine.predicate overrides a final member: register implementations in 'predicates' instead"
            in message)
    assert "predicates['too_long'] is not callable (a function of the config)" in message
    assert message.count("; ") == 3  # nothing else: harness, reference_law and check_request keep it


def test_the_shared_record_shapes_are_the_probes_types_and_replays_schemas():
    # One definition (badc_trace/records.py): what BaseInstrumentor writes is what replay's schemas check,
    # and every engine's request and return schema extends the shared envelope.
    from typing import NotRequired, TypedDict

    from badc_replay.registry import engine_names, get_engine
    from badc_replay.schema import IDS, REQ, SHARED, spec_of
    from badc_trace.records import (
        Counter,
        CrashRecord,
        RequestRecord,
        ReturnRecord,
        crash_record,
        request_record,
        return_record,
    )

    assert SHARED["crash"] == spec_of(CrashRecord) and set(SHARED["crash"].optional) == {"message"}
    assert set(SHARED["counts"].optional) == {str(c) for c in Counter}
    assert SHARED["crash"].problem(crash_record(7, "processor", ValueError("x"))) is None
    assert SHARED["crash"].problem({"req": 7, "where": "processor"}) == "field 'exc' is missing"

    class Widened(TypedDict):  # a field added to a shared type reaches the schema without a second edit
        type: str
        req: int | None
        ids: list[int]
        note: NotRequired[str]

    widened = spec_of(Widened)
    assert widened.required == {"req": REQ, "ids": IDS} and set(widened.optional) == {"note"}
    envelopes = {"request": spec_of(RequestRecord), "return": spec_of(ReturnRecord)}
    assert envelopes["return"].problem(return_record(3, [4], "4|eos", finish_reason="eos")) is None
    assert envelopes["request"].problem(request_record(3, [1, 2], params={})) is None
    for name in engine_names():
        schema = get_engine(name).record_schema
        assert schema is not None, name
        for kind, envelope in envelopes.items():
            assert envelope.required.items() <= schema[kind].required.items(), (name, kind)


def test_badc_s_own_engines_are_found_through_the_entry_points_an_engine_package_uses():
    # No built-in list: each of the five kinds (engines, probes, builds, repairs, tiny models) is declared in
    # pyproject.toml for every engine, and set-up's bootstrap reads the same builds files by path.
    import tomllib

    from badc_check.builds import checkout_builds_files, engine_builds_files
    from badc_replay.registry import engine_names
    from badc_replay.repairs import repair_folders
    from badc_trace.registry import probe_paths
    from badc_trace.tiny import engines, tiny_module

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    kinds = ("badc.engines", "badc.probes", "badc.builds", "badc.repairs", "badc.tiny")
    names = {kind: set(declared[kind]) for kind in kinds}
    assert all(n == names["badc.engines"] for n in names.values()), names
    assert set(engine_names()) == set(probe_paths()) == set(engines()) == set(repair_folders()) == names["badc.engines"]
    assert sorted(engine_builds_files()) == sorted(checkout_builds_files(ROOT))
    assert all(folder.is_dir() and any(folder.glob("*/intervention.py")) for folder in repair_folders().values())
    assert all(tiny_module(e).DEFAULT_SEED >= 0 for e in engines())
