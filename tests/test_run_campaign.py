"""`badc run`, the generic runner, on the toy engine (badc_toy, which runs in .venv): workers as
subprocesses, seal, report, plots, anytime looks, failure safety, executors. The real engines' campaigns
are in tests/engines/ (test_*_campaign.py); the built-in campaign's test here reads the real builds."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from badc_check.builds import load_builds
from badc_check.campaign import BUILTIN, CampaignError, installed_only, load_campaign, run_campaign
from badc_check.campaign.result import CampaignReport
from badc_check.outcome import outcome
from tests.shard_resume import kill_and_resume, same_shard

CAMPAIGN = """
[campaign]
name = "t"
alpha = 0.05
threshold = 0.01
draws = 1500
seed = 5
shard = 500

[defaults]
engine = "toy"
build = "0.1.0"
model = "tiny"
max_new_tokens = 4
drafter = {{ method = "prompt_lookup", num_tokens = 3, max_ngram_size = 2 }}

[[config]]
id = "NEG"
role = "negative-control"
processors = [{{ name = "min_tokens", min_tokens = 3 }}]

[[config]]
id = "PAR"
processors = [{{ name = "min_tokens", min_tokens = 3 }}]
defects = ["D1"]
predicates = ["min_tokens"]
hypothesis = "H-D1"

[[config]]
id = "OTHER-ENGINE"
engine = "{other}"
build = "9.9"
"""
QUIET = dict(log=lambda m: None, plots=False)


@pytest.fixture(autouse=True)
def a_build_not_set_up(tmp_path_factory, monkeypatch):
    """Every engine's builds with a toy build 9.9 declared and never set up: OTHER-ENGINE's (an undeclared
    build is a campaign-file error, refused before the seal; a declared one not set up here leaves its config
    INCONCLUSIVE, or pending in a partial report)."""
    import badc_check.builds as builds

    path = tmp_path_factory.mktemp("builds") / "builds.toml"
    path.write_text("".join(f.read_text() + "\n" for f in builds.engine_builds_files())
                    + '[builds."toy-9.9"]\nengine = "toy"\nversion = "9.9"\nrequirements = []\n')
    monkeypatch.setenv("BADC_BUILDS_FILE", str(path))  # the runner's subprocesses read it too


def _write(tmp_path, text, name="c.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _checkpointed(path: Path) -> int:
    try:
        return json.loads(path.read_text())["done"]
    except (OSError, ValueError):  # gone: its shard just finished
        return 0


def _arm_counts(out: Path, cid: str, arm: str) -> dict:
    total: dict = {}
    for f in sorted((out / "shards" / cid).glob(f"{arm}-*.json")):
        for y, k in json.loads(f.read_text())["outcomes"].items():
            total[y] = total.get(y, 0) + k
    return total


def test_run_writes_report_plots_and_refuses_changed_inputs(tmp_path):
    path = _write(tmp_path, CAMPAIGN.format(other="toy"))
    out = tmp_path / "out"
    report = run_campaign(load_campaign(path), out, workers=2, log=lambda m: None)
    by_id = {c["id"]: c for c in report["configs"]}
    assert by_id["NEG"]["decision"] == "NOT_REJECTED" and by_id["NEG"]["calibration"]["passed"] is True
    assert by_id["PAR"]["decision"] == "FAILS" and by_id["PAR"]["witnesses"] > 0
    assert by_id["PAR"]["contract"]["first_violation"]["kind"] == "D1"
    assert by_id["PAR"]["draws"] == {"on": 1500, "off": 1500}
    other = by_id["OTHER-ENGINE"]
    assert other["decision"] == "INCONCLUSIVE" and "build 'toy-9.9' is not set up" in other["reasons"][0]
    assert report["m"] == 3 and report["interrupted"] is False
    saved = json.loads((out / "report.json").read_text())
    assert saved["seal"] == report["seal"] == json.loads((out / "seal.json").read_text())["seal"]
    # a frozen typed report, and report.json is written from it (the mapping view reads as the file does)
    assert isinstance(report, CampaignReport) and report.complete and report.name == "report"
    assert saved == report.to_dict() == dict(report) and "pending" not in report
    assert report.configs[0] is report["configs"][0] and report.m == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.m = 4
    assert "| PAR | toy |" in (out / "report.md").read_text()
    assert (out / "plots" / "PAR.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list((out / "traces" / "PAR").glob("on-*.badc"))) == 3
    from badc_trace.format import read_trace

    assert read_trace(out / "traces" / "PAR" / "on-500.badc").header["seal"] == report["seal"]
    # Same inputs: every job's result is reused, nothing is drawn again.
    again = run_campaign(load_campaign(path), out, workers=1, **QUIET)
    assert again["jobs_reused"] == report["jobs_reused"] + 2 * (1 + 3 + 3)
    assert [c["decision"] for c in again["configs"]] == [c["decision"] for c in report["configs"]]
    # A changed input under the seal is refused, naming what changed.
    changed = _write(tmp_path, CAMPAIGN.format(other="toy").replace("threshold = 0.01", "threshold = 0.02"))
    with pytest.raises(CampaignError, match="settings"):
        run_campaign(load_campaign(changed), out, **QUIET)
    edited = _write(tmp_path, CAMPAIGN.format(other="toy").replace('id = "PAR"\n',
                                                                       'id = "PAR"\nmax_new_tokens = 3\n'))
    with pytest.raises(CampaignError, match="config PAR"):
        run_campaign(load_campaign(edited), out, **QUIET)
    # Another shard size would make new shards overlap the finished ones: refused before any draw.
    resharded = _write(tmp_path, CAMPAIGN.format(other="toy").replace("shard = 500", "shard = 300"))
    with pytest.raises(CampaignError, match="hold 500 draws each.*shard = 300"):
        run_campaign(load_campaign(resharded), out, **QUIET)


def test_a_config_is_decided_from_its_on_and_off_arms_while_its_repair_arms_are_not_done(tmp_path):
    from badc_check.campaign import decide_from_folder, plan

    text = CAMPAIGN.format(other="toy").replace('hypothesis = "H-D1"\n',
                                              'hypothesis = "H-D1"\nrepair = "toy/logical-rows"\n')
    campaign = load_campaign(_write(tmp_path, text), confirm_draws=1000)
    out = tmp_path / "out"
    report = run_campaign(campaign, out, workers=2, **QUIET)
    par = next(c for c in report["configs"] if c["id"] == "PAR")
    assert par["decision"] == "FAILS" and par["repair"] is not None
    config = next(c for c in campaign.configs if c["id"] == "PAR")
    jobs = plan(campaign, config)
    whole = decide_from_folder(config, jobs, out, campaign, report["m"])
    assert set(whole.arms) == {"on", "off", "on-confirm", "off-confirm", "repaired"}
    assert whole.decision.to_dict()["repair"] == par["repair"]
    for f in (out / "shards" / "PAR").glob("repaired-*.json"):  # as while the repaired arm still runs
        f.unlink()
    early = decide_from_folder(config, jobs, out, campaign, report["m"], arms=("on", "off"))
    assert set(early.arms) == {"on", "off"} and early.decision.repair is None
    assert (early.decision.decision, early.decision.D) == (par["decision"], par["D"])
    assert early.decision.to_dict()["contract"] == par["contract"]
    # the partial report lists it as pending (its confirmation is not done, so neither is the config),
    # with its final discovery decision beside, and never as confirmed
    partial = run_campaign(campaign, out, partial=True, **QUIET)
    assert "PAR" not in [c["id"] for c in partial["configs"]]
    (pend,) = [p for p in partial["pending"] if p["id"] == "PAR"]
    assert pend["discovery"] == f"FAILS, D {par['D']:.4f}" and pend["draws"]["repaired"].startswith("0/")
    assert f"| FAILS, D {par['D']:.4f} |" in (out / "report-partial.md").read_text()
    # Delta B on the confirmation arms: no records, so every weight is one; level alpha / confirm_m
    db = par["repair"]["delta_b"]
    assert db["weights"] == "ones" and db["level"] == pytest.approx(0.05 / report["confirm_m"])
    assert db["delta"] == pytest.approx(db["on"] - db["off"]) and db["low"] < db["delta"] < db["high"]
    assert "Delta B (TRL sequence-mask importance weight" in (out / "report.md").read_text()


def test_a_campaign_confirming_both_cells_runs_the_selection_of_each(tmp_path):
    # PAR fails with and without A_H (its witnesses decide it): both cells select it, one confirmation runs,
    # and the confirmation budget counts both cells
    text = CAMPAIGN.format(other="toy").replace('hypothesis = "H-D1"\n',
                                              'hypothesis = "H-D1"\nrepair = "toy/logical-rows"\n')
    text = text.replace("shard = 500\n", "shard = 500\nconfirm_without_hypothesis_events = true\n")
    report = run_campaign(load_campaign(_write(tmp_path, text), confirm_draws=1000), tmp_path / "out", workers=2,
                          **QUIET)
    par = next(c for c in report["configs"] if c["id"] == "PAR")
    assert report["confirm_m"] == 2 and report["confirmation_attempts"] == ["PAR"]
    assert par["without_hypothesis_events"]["decision"] == "FAILS" and par["repair"]["attempted"] is True
    assert par["repair"]["delta_b"]["level"] == pytest.approx(0.05 / 2)


def test_delta_b_weights_come_from_returned_records_where_the_engine_returns_them(tmp_path):
    from badc_check.campaign import decide_from_folder, plan
    from badc_check.delta_b import unweighted

    # D4: an accepted draft token's returned log-probability is another row's, so TRL's weights are not one
    text = CAMPAIGN.format(other="toy").replace('defects = ["D1"]\n', 'defects = ["D1", "D4"]\nlogprobs = true\n'
                                              'repair = "toy/logical-rows"\n')
    campaign = load_campaign(_write(tmp_path, text), confirm_draws=1000)
    out = tmp_path / "out"
    report = run_campaign(campaign, out, workers=2, **QUIET)
    par = next(c for c in report["configs"] if c["id"] == "PAR")
    db = par["repair"]["delta_b"]
    assert db["weights"] == "records" and db["masked"]["off"] == 0
    config = next(c for c in campaign.configs if c["id"] == "PAR")
    arms = decide_from_folder(config, plan(campaign, config), out, campaign, report["m"]).arms
    off, on = arms["off-confirm"], arms["on-confirm"]
    assert off.records["weighted_reward"]["sum"] == pytest.approx(unweighted(off.outcomes).sum_wr)  # records right
    assert on.records["weighted_reward"]["sum"] != pytest.approx(unweighted(on.outcomes).sum_wr, abs=1e-6)
    assert db["on"] == pytest.approx(on.records["weighted_reward"]["sum"] / on.draws)


def test_a_repair_applied_to_both_arms_decides_the_build_past_its_defect_and_says_so(tmp_path):
    from badc_trace.format import read_trace

    # PAR twice: as shipped (its planted D1 fails it), and with the frozen repair taken as part of the build
    fixed_config = ('[[config]]\nid = "PAR-FIXED"\nprocessors = [{ name = "min_tokens", min_tokens = 3 }]\n'
                    'defects = ["D1"]\npredicates = ["min_tokens"]\napplied = ["toy/logical-rows"]\n\n')
    text = CAMPAIGN.format(other="toy").replace('[[config]]\nid = "OTHER-ENGINE"',
                                                fixed_config + '[[config]]\nid = "OTHER-ENGINE"')
    path = _write(tmp_path, text)
    out = tmp_path / "out"
    report = run_campaign(load_campaign(path), out, workers=2, **QUIET)

    by_id = {c["id"]: c for c in report["configs"]}
    assert by_id["PAR"]["decision"] == "FAILS" and by_id["PAR"]["applied"] == []
    fixed = by_id["PAR-FIXED"]
    assert fixed["decision"] == "NOT_REJECTED" and fixed["applied"] == ["toy/logical-rows"]
    assert fixed["exercise"]["proposed"] > 0 and fixed["contract"]["status"] == "held"
    md = (out / "report.md").read_text()
    assert "| PAR-FIXED | toy | 0.1.0 + toy/logical-rows |" in md
    assert "- tested on toy 0.1.0 with toy/logical-rows applied to both arms" in md
    for arm in ("on", "off"):  # each arm's traces name what was applied
        header = read_trace(str(out / "traces" / "PAR-FIXED" / f"{arm}-0.badc")).header
        assert header["config"]["applied"] == ["toy/logical-rows"]
    # sealed with the config: taking it away is a changed input
    with pytest.raises(CampaignError, match="config PAR-FIXED"):
        run_campaign(load_campaign(_write(tmp_path, text.replace('applied = ["toy/logical-rows"]\n', ""))), out,
                     **QUIET)


def test_anytime_stops_a_strong_failure_at_an_early_look_and_decides_as_fixed_n(tmp_path):
    text = CAMPAIGN.format(other="toy").replace("draws = 1500", "draws = 2000")
    path = _write(tmp_path, text)
    fixed = run_campaign(load_campaign(path), tmp_path / "fixed", workers=2, **QUIET)
    camp = load_campaign(path, anytime=True)
    assert camp.seal()["seal"] != load_campaign(path).seal()["seal"]  # the stopping rule is sealed
    out = tmp_path / "anytime"
    report = run_campaign(camp, out, workers=2, **QUIET)
    by_id = {c["id"]: c for c in report["configs"]}
    assert [lk["draws"] for lk in report["anytime"]] == [1000, 2000]
    # min_tokens witnesses decide it at the first look: 1,000 draws per arm (a chain still in flight may
    # have drawn later shards; they are not read).
    assert by_id["PAR"]["decision"] == "FAILS" and by_id["PAR"]["eligible"]
    assert by_id["PAR"]["anytime"] == {"look": 1, "of": 2, "draws": 1000, "spend": 0.5}
    assert by_id["PAR"]["draws"] == {"on": 1000, "off": 1000}
    # NOT_REJECTED only at the last look, on every draw.
    assert by_id["NEG"]["decision"] == "NOT_REJECTED" and by_id["NEG"]["draws"] == {"on": 2000, "off": 2000}
    assert by_id["NEG"]["anytime"]["look"] == 2
    assert {c["id"]: c["decision"] for c in fixed["configs"]} == {c["id"]: c["decision"] for c in report["configs"]}
    assert "decided at look 1 of 2" in (out / "report.md").read_text()
    # A rerun reuses the looks' shards and gives the same decisions, and draws nothing more for a config
    # decided at an early look (its later shards, drawn by a chain in flight, taken away first).
    for f in (out / "shards" / "PAR").glob("*.json"):
        if int(f.stem.rsplit("-", 1)[1]) >= 1000:
            f.unlink()
    again = run_campaign(camp, out, workers=1, **QUIET)
    assert [c["decision"] for c in again["configs"]] == [c["decision"] for c in report["configs"]]
    left = sorted(f.name for f in (out / "shards" / "PAR").glob("*.json"))
    assert left == ["off-0.json", "off-500.json", "on-0.json", "on-500.json"]


def test_the_look_watcher_stops_a_decided_configs_chains(tmp_path):
    # Under --anytime each arm's shards run as one chain in one worker; the watcher decides each look as its
    # shards land and marks a stopped config, and a marked chain begins no further shard.
    from badc_check.campaign.plan import Chain, discovery_jobs
    from badc_check.campaign.watch import LookWatcher

    camp = load_campaign(_write(tmp_path, CAMPAIGN.format(other="toy").replace("draws = 1500", "draws = 2000")),
                         anytime=True)
    out = tmp_path / "run"
    run_campaign(camp, out, workers=2, only=["PAR", "NEG"], **QUIET)
    jobs = {c["id"]: discovery_jobs(camp, c) for c in camp.configs if c["id"] in ("PAR", "NEG")}
    drawn = {}
    for js in jobs.values():  # as if only the first look had been drawn
        for j in js[1:]:
            if j.start >= 1000:
                if j.output(out).exists():
                    drawn[j.output(out)] = json.loads(j.output(out).read_text())["outcomes"]
                j.output(out).unlink(missing_ok=True)
    logged, told = [], []
    with LookWatcher(jobs, out, camp, camp.m, logged.append, on_stop=lambda *a: told.append(a)) as watch:
        watch.poll()
        assert watch.stopped == {"PAR"} and watch.stop_file("PAR").exists() and not watch.stop_file("NEG").exists()
        assert told == [("PAR", ("on", "off"))]  # the progress settles its arms: their later shards leave the time left
        assert watch.evaluated == {"PAR": 1, "NEG": 1}
        assert logged == ["PAR: FAILS at look 1 of 2 (1,000 draws per arm): its remaining shards are not needed"]
        later = [j for j in jobs["PAR"] if j.kind == "shard" and j.arm == "on" and j.start >= 1000]
        chain = Chain(later, watch.stop_file("PAR"))
        cfg = out / "configs" / "PAR.json"
        cmd = chain.command(sys.executable, cfg, out, camp.seed, "s")
        assert cmd[cmd.index("--chain") + 1] == "1000:500,1500:500" and "--start" not in cmd
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert not any(j.output(out).exists() for j in later)
        watch.stop_file("PAR").unlink()  # unmarked, the same chain draws both shards in one process
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0 and all(j.output(out).exists() for j in later), proc.stderr
        # draw for draw what the campaign's own run drew there, where it did
        for p in (j.output(out) for j in later if j.output(out) in drawn):
            assert json.loads(p.read_text())["outcomes"] == drawn[p]
        assert [line.split()[-1] for line in proc.stderr.splitlines() if line.endswith("/500 1000")][-1] == "1000"
    assert not watch.stop_dir.exists()


def test_merging_refuses_shards_that_overlap_or_leave_a_gap():
    from badc_check.campaign import merge_shards

    def shard(start, count):
        return {"arm": "on", "start": start, "count": count, "outcomes": {"y": count}, "proposed": 0,
                "accepted": 0, "violations": 0}

    assert merge_shards([shard(500, 500), shard(0, 500)]).draws == 1000
    with pytest.raises(CampaignError, match="on-300 does not start at draw 500"):
        merge_shards([shard(0, 500), shard(300, 300)])
    with pytest.raises(CampaignError, match="on-600 does not start at draw 500"):
        merge_shards([shard(0, 500), shard(600, 500)])


def test_merging_reports_drafter_state_carried_over_within_and_between_shards():
    from badc_check.campaign import merge_shards, report_markdown

    fresh, grown = {"num_assistant_tokens": 2}, {"num_assistant_tokens": 4}

    def shard(start, settings, carried=0, first=None):
        contract = {"calls": 1, "requests": 500, "drafter_settings": settings, "carried_over": carried,
                    "first_carry_over": first}
        return {"arm": "on", "start": start, "count": 500, "outcomes": {"y": 500}, "proposed": 0, "accepted": 0,
                "violations": 0, "contract": contract}

    alike = merge_shards([shard(0, fresh), shard(500, fresh)]).contract
    assert alike["drafter_settings"] == fresh and alike["carried_over"] == 0 and alike["first_carry_over"] is None
    within = {"request": 700, "expected": fresh, "seen": grown, "message": "request 700, ..."}
    # the shard at 1000 started otherwise than the one at 0: its worker's environment differs
    merged = merge_shards([shard(0, fresh), shard(500, fresh, 3, within), shard(1000, grown)]).contract
    assert merged["carried_over"] == 4 and merged["first_carry_over"] == within
    merged = merge_shards([shard(0, fresh), shard(500, grown), shard(1000, fresh, 3, within)]).contract
    assert merged["carried_over"] == 4 and merged["first_carry_over"]["request"] == 500
    assert "{'num_assistant_tokens': 4}" in merged["first_carry_over"]["message"]
    assert "carried_over" not in merge_shards([shard(0, None)]).contract  # engines that record no settings
    report = {"campaign": "c", "seal": "s", "alpha": 0.05, "m": 1, "threshold": 0.01, "draws": 1500,
              "configs": [{"id": "A", "engine": "e", "build": "b", "role": "r", "decision": "NOT_REJECTED",
                           "eligible": True, "witnesses": 0, "exercise": {"proposed": 1},
                           "calibration": {"passed": True}, "contract": merged}]}
    assert "- drafter state carried over: 4 of 1,500 requests" in report_markdown(report)


def _worker_pids(arm: str, out: Path) -> list[int]:
    """Workers of this test's campaign only (never another campaign running on the machine)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"badc_replay.worker" in cmd and arm.encode() in cmd and str(out).encode() in cmd:
                pids.append(int(d.name))
    return pids


def test_killed_workers_and_an_interrupted_campaign_lose_nothing_and_count_nothing_twice(tmp_path, monkeypatch):
    text = CAMPAIGN.format(other="toy").replace("draws = 1500", "draws = 3000")
    path = _write(tmp_path, text)
    reference = tmp_path / "reference"
    run_campaign(load_campaign(path), reference, workers=2, **QUIET)

    # 1. Kill worker processes mid-shard: the runner re-runs those shards with the same seeds.
    killed_out = tmp_path / "killed"
    done = threading.Event()
    thread = threading.Thread(target=lambda: (run_campaign(load_campaign(path), killed_out, workers=2, **QUIET),
                                              done.set()))
    thread.start()
    kills = 0
    deadline = time.monotonic() + 120
    while kills < 2 and time.monotonic() < deadline and not done.is_set():
        for pid in _worker_pids("on", killed_out):
            os.kill(pid, signal.SIGKILL)
            kills += 1
        time.sleep(0.05)
    thread.join(300)
    assert kills >= 1 and done.is_set()

    # 2. Kill the whole campaign (runner and workers) once an on-arm shard is done and another is cut
    #    off well inside its checkpointed part, then run the same command again.
    monkeypatch.setenv("BADC_CHECKPOINT_S", "0")  # a checkpoint after every draw
    interrupted = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "badc_check.cli", "run", str(path), "--out", str(interrupted), "--no-plots"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (list((interrupted / "shards").glob("*/on-*.json"))
                                               and any(0 < _checkpointed(f) <= 250
                                                       for f in (interrupted / "traces").glob("*/*.resume"))):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (interrupted / "RUNNING").exists() and not (interrupted / "report.json").exists()
    resumed = run_campaign(load_campaign(path), interrupted, workers=2, **QUIET)
    assert resumed["interrupted"] is True and resumed["jobs_reused"] > 0 and resumed["draws_resumed"] > 0
    assert "interrupted and completed" in (interrupted / "report.md").read_text()

    for out in (killed_out, interrupted):
        for cid in ("NEG", "PAR"):
            for arm in ("on", "off"):
                counts = _arm_counts(out, cid, arm)
                assert sum(counts.values()) == 3000
                assert counts == _arm_counts(reference, cid, arm)  # the sealed roster, draw for draw


def test_a_bad_checkpoint_interval_is_refused_before_any_worker_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("BADC_CHECKPOINT_S", "soon")
    with pytest.raises(CampaignError, match="BADC_CHECKPOINT_S must be a number of seconds >= 0, not 'soon'"):
        run_campaign(load_campaign(_write(tmp_path, CAMPAIGN.format(other="toy"))), tmp_path / "o", **QUIET)
    assert not (tmp_path / "o" / "shards").exists()


def test_a_killed_shard_goes_on_from_its_checkpoint_draw_for_draw(tmp_path):
    campaign = load_campaign(_write(tmp_path, CAMPAIGN.format(other="toy")))
    config = next(c for c in campaign.configs if c["id"] == "PAR")  # violations: the replay has work to do
    python = str(load_builds()["toy-0.1.0"].python)
    straight, resumed = kill_and_resume(python, config, tmp_path, arm="on", count=1500, level="calls",
                                        kill_after=300)
    assert straight["resumed"] == 0 and 300 <= resumed["resumed"] < 1500
    assert same_shard(straight, resumed) and resumed["violations"] > 0


def test_ray_executor_on_a_local_cluster_gives_the_same_draws(tmp_path):
    ray = pytest.importorskip("ray")
    path = _write(tmp_path, CAMPAIGN.format(other="toy").replace("draws = 1500", "draws = 500"))
    local = tmp_path / "local"
    run_campaign(load_campaign(path), local, workers=2, **QUIET)
    try:
        report = run_campaign(load_campaign(path), tmp_path / "ray", workers=2, executor="ray", **QUIET)
    finally:
        ray.shutdown()
    assert [c["decision"] for c in report["configs"]] == ["NOT_REJECTED", "FAILS", "INCONCLUSIVE"]
    for cid in ("NEG", "PAR"):
        for arm in ("on", "off"):
            assert _arm_counts(tmp_path / "ray", cid, arm) == _arm_counts(local, cid, arm)


def test_builtin_keeps_the_configs_of_installed_builds_only(tmp_path):
    builtin = load_campaign(str(BUILTIN))
    engines = {c["engine"] for c in builtin.configs}
    assert {"llama_cpp", "transformers"} <= engines
    said: list[str] = []
    kept = installed_only(builtin, log=said.append)
    installed = {f"{b.engine}-{b.version}" for b in load_builds().values() if b.installed}
    assert all(f"{c['engine']}-{c['build']}" in installed for c in kept.configs)
    # the one line names each left-out config as "ID (engine-build)", after the "(build not set up): " lead
    dropped = [part for m in said for part in m.split("): ", 1)[1].split(", ")]
    assert len(kept.configs) + len(dropped) == len(builtin.configs)
    nothing = load_campaign(_write(tmp_path, CAMPAIGN.format(other="toy").replace('build = "0.1.0"',
                                                                              'build = "9.9"')))
    with pytest.raises(CampaignError, match="no engine build is set up"):
        installed_only(nothing, log=said.append)


def test_partial_report_decides_finished_configs_with_the_final_m_and_runs_nothing(tmp_path):
    import shutil

    path = _write(tmp_path, CAMPAIGN.format(other="toy"))
    full = tmp_path / "full"
    final = run_campaign(load_campaign(path), full, workers=2, **QUIET)
    half = tmp_path / "half"
    shutil.copytree(full, half)
    (half / "report.json").unlink()
    (half / "shards" / "PAR" / "on-500.json").unlink()
    files = sorted(p.name for p in half.rglob("*"))

    report = run_campaign(load_campaign(path), half, partial=True, **QUIET)

    assert report["m"] == final["m"] == 3
    assert not report.complete and report.name == "report-partial" and len(report.pending) == 2
    assert json.loads((half / "report-partial.json").read_text()) == report.to_dict()
    assert [c["id"] for c in report["configs"]] == ["NEG"]
    neg = next(c for c in final["configs"] if c["id"] == "NEG")
    assert report["configs"][0]["decision"] == neg["decision"] and report["configs"][0]["D"] == neg["D"]
    # a build not set up here is pending in a partial report (a machine with it decides the config), while
    # the whole run's report says INCONCLUSIVE with the same reason
    unbuilt = next(c for c in final["configs"] if c["id"] == "OTHER-ENGINE")
    assert unbuilt["decision"] == "INCONCLUSIVE"
    assert report["pending"] == [{"id": "PAR", "laws": True, "failed": None,
                                  "draws": {"off": "1,500/1,500", "on": "1,000/1,500"}},
                                 {"id": "OTHER-ENGINE", "laws": False, "failed": unbuilt["reasons"][0],
                                  "draws": {"off": "0/1,500", "on": "0/1,500"}}]
    md = (half / "report-partial.md").read_text()
    assert "1 of 3 configs decided" in md and "| PAR | done | off 1,500/1,500, on 1,000/1,500 | - |" in md
    assert f"| OTHER-ENGINE | pending | off 0/1,500, on 0/1,500 | {unbuilt['reasons'][0]} |" in md
    assert sorted(p.name for p in half.rglob("*")) == sorted(files + ["report-partial.json", "report-partial.md"])
    assert not (half / "report.json").exists()
    with pytest.raises(CampaignError, match="no sealed campaign"):
        run_campaign(load_campaign(path), tmp_path / "empty", partial=True, **QUIET)


def test_a_config_whose_build_is_not_set_up_here_is_decided_from_the_jobs_it_already_has(tmp_path, monkeypatch):
    # A study split over machines: the shards kept from a machine with the build decide its configs on one
    # without it, with the same decision and D; nothing of them runs here.
    import badc_check.campaign.run as runner

    path = _write(tmp_path, CAMPAIGN.format(other="toy"))
    final = run_campaign(load_campaign(path), tmp_path / "out", workers=2, **QUIET)
    (tmp_path / "out" / "report.json").unlink()

    def not_here(engine, build):
        raise LookupError(f"build '{engine}-{build}' is not set up")
    monkeypatch.setattr(runner, "build_for", not_here)
    files = sorted(p.name for p in (tmp_path / "out").rglob("*"))
    again = run_campaign(load_campaign(path), tmp_path / "out", workers=2, **QUIET)
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == sorted(files + ["report.json"])
    pick = {c["id"]: (c["decision"], c["D"]) for c in final["configs"]}
    assert {c["id"]: (c["decision"], c["D"]) for c in again["configs"]} == pick
    assert pick["PAR"][0] == "FAILS" and pick["OTHER-ENGINE"][0] == "INCONCLUSIVE"


def test_the_report_says_which_drawing_code_drew_the_shards_and_when_it_was_more_than_one(tmp_path):
    from badc_replay.provenance import code_digest

    path = _write(tmp_path, CAMPAIGN.format(other="toy"))
    out = tmp_path / "out"
    report = run_campaign(load_campaign(path), out, workers=2, **QUIET)
    shards, laws = sorted((out / "shards").rglob("*.json")), sorted((out / "laws").glob("*.json"))
    assert report["code_versions"] == {code_digest(): len(shards)} and len(shards) >= 6
    assert report["laws_code_versions"] == {code_digest(): len(laws)} and len(laws) >= 2
    assert f"Drawing code: {code_digest()} (every shard and laws file)." in (out / "report.md").read_text()
    # one shard and one laws file by another version of badc (a campaign resumed after an upgrade): the
    # rerun draws nothing, decides the same, and says that two versions drew its shards and laws
    for f in (shards[0], laws[0]):
        f.write_text(json.dumps({**json.loads(f.read_text()), "code": "0123456789abcdef"}))
    logs: list[str] = []
    again = run_campaign(load_campaign(path), out, log=logs.append, plots=False)
    assert again["code_versions"] == {"0123456789abcdef": 1, code_digest(): len(shards) - 1}
    assert again["laws_code_versions"] == {"0123456789abcdef": 1, code_digest(): len(laws) - 1}
    assert [c["decision"] for c in again["configs"]] == [c["decision"] for c in report["configs"]]
    assert ("**The shards and laws were drawn by 2 versions of badc's drawing code** (0123456789abcdef: 1 shard, "
            "1 laws file; ") in (out / "report.md").read_text()
    assert any("drawn by 2 versions of badc's drawing code" in m for m in logs)


def test_only_runs_the_named_configs_with_the_whole_rosters_seal_and_m(tmp_path):
    path = _write(tmp_path, CAMPAIGN.format(other="toy"))
    full = run_campaign(load_campaign(path), tmp_path / "full", workers=2, **QUIET)
    out = tmp_path / "split"

    first = run_campaign(load_campaign(path), out, workers=2, only=["PAR"], **QUIET)

    assert first["m"] == 3 and [p["id"] for p in first["pending"]] == ["NEG", "OTHER-ENGINE"]
    assert not (out / "laws" / "NEG.json").exists() and not (out / "shards" / "NEG").exists()
    assert (out / "report-partial.md").exists() and not (out / "report.json").exists()
    assert not (out / "RUNNING").exists()  # a finished --only run was not interrupted
    (out / "RUNNING").write_text("1")  # as a run that was cut off leaves it
    assert run_campaign(load_campaign(path), out, workers=2, only=["PAR"], **QUIET)["interrupted"] is True
    assert (out / "RUNNING").exists()  # kept, so that the report that ends the roster says so
    second = run_campaign(load_campaign(path), out, workers=2, only=["NEG"], **QUIET)
    assert "pending" not in second and (out / "report.json").exists()
    assert second["interrupted"] is True and not (out / "RUNNING").exists()
    # the same seal and seeds: split or whole, the draws and decisions are the same
    assert second["seal"] == full["seal"]
    for a, b in zip(second["configs"], full["configs"], strict=True):
        assert (a["id"], a["decision"], a["D"]) == (b["id"], b["decision"], b["D"])
    with pytest.raises(CampaignError, match=r"--only: NOPE not in campaign 't' \(its configs: NEG, PAR, OTHER"):
        run_campaign(load_campaign(path), out, only=["PAR", "NOPE"], **QUIET)


def test_a_job_that_keeps_failing_leaves_its_config_pending_under_only_and_inconclusive_in_a_whole_run(
        tmp_path, monkeypatch):
    from badc_check.campaign import RETRIES, Job

    command, tries = Job.command, []

    def broken(self, *args, **kwargs):  # PAR's second on-arm shard exits 3, every time it is tried
        if (self.cid, self.kind, self.arm, self.start) == ("PAR", "shard", "on", 500):
            tries.append(1)
            return [sys.executable, "-c", "raise SystemExit(3)"]
        return command(self, *args, **kwargs)

    monkeypatch.setattr(Job, "command", broken)
    path = _write(tmp_path, CAMPAIGN.format(other="toy"))
    out = tmp_path / "out"
    logged: list[str] = []
    why = f"1 job(s) failed after {RETRIES + 1} attempts (first: shard on 500)"

    first = run_campaign(load_campaign(path), out, workers=2, only=["PAR"], log=logged.append, plots=False)

    assert len(tries) == RETRIES + 1
    assert [(p["id"], p["failed"]) for p in first["pending"]][:2] == [("NEG", None), ("PAR", why)]
    assert f"PAR: {why}; still pending, the next run retries them" in logged
    assert f"| PAR | done | off 1,500/1,500, on 1,000/1,500 | {why} |" in (out / "report-partial.md").read_text()
    whole = run_campaign(load_campaign(path), out, workers=2, **QUIET)
    par = next(c for c in whole["configs"] if c["id"] == "PAR")
    assert "pending" not in whole and par["decision"] == "INCONCLUSIVE" and why in par["reasons"]
    assert len(tries) == 2 * (RETRIES + 1)  # the whole run tried it again
    assert next(c for c in whole["configs"] if c["id"] == "NEG")["decision"] == "NOT_REJECTED"
    left = outcome(whole["configs"])  # what `badc run` exits with: nothing rejected, PAR not decided
    assert left.exit_code == 3 and not left.rejected and f"PAR: INCONCLUSIVE ({why})" in left.unchecked


def test_the_exit_status_is_0_only_for_a_campaign_done_in_full_with_nothing_rejected(tmp_path, capsys):
    from badc_check.cli import main

    neg_only = _write(tmp_path, CAMPAIGN.format(other="toy").split('[[config]]\nid = "PAR"')[0], "neg.toml")
    assert main(["run", str(neg_only), "--out", str(tmp_path / "neg"), "--no-plots", "--workers", "2"]) == 0
    err = capsys.readouterr().err
    assert "badc run: REJECTED" not in err and "badc run: UNCHECKED" not in err
    both = str(_write(tmp_path, CAMPAIGN.format(other="toy").split('[[config]]\nid = "OTHER')[0], "both.toml"))
    out = str(tmp_path / "both")
    # a partial report: NEG decided, PAR still pending, so not a pass
    assert main(["run", both, "--out", out, "--no-plots", "--only", "NEG"]) == 3
    assert "badc run: UNCHECKED: PAR: pending, not decided" in capsys.readouterr().err
    assert main(["run", both, "--out", out, "--no-plots"]) == 1
    err = capsys.readouterr().err
    assert "badc run: REJECTED: PAR: FAILS (" in err and "badc run: REJECTED: PAR: on-arm contract broken" in err


def test_a_shard_that_hangs_is_killed_after_the_stall_limit_and_its_config_left_pending(tmp_path, monkeypatch):
    from badc_check.campaign import RETRIES, Job

    command = Job.command

    def hung(self, *args, **kwargs):  # PAR's first on-arm shard prints nothing and never ends
        if (self.cid, self.kind, self.arm, self.start) == ("PAR", "shard", "on", 0):
            return [sys.executable, "-c", "import time; time.sleep(600)"]
        return command(self, *args, **kwargs)

    monkeypatch.setattr(Job, "command", hung)
    monkeypatch.setenv("BADC_STALL_S", "20")  # start-up included: the toy's real shards print well within it
    path = _write(tmp_path, CAMPAIGN.format(other="toy"))
    logged: list[str] = []
    t = time.monotonic()
    report = run_campaign(load_campaign(path), tmp_path / "out", workers=2, only=["PAR"], log=logged.append,
                          plots=False)
    assert time.monotonic() - t < 300  # not 600 s per try
    assert sum("PAR: shard on 0 made no progress for 20 s (BADC_STALL_S): killed as hung" in m for m in logged) \
        == RETRIES + 1
    par = next(p for p in report["pending"] if p["id"] == "PAR")
    assert par["failed"] == f"1 job(s) failed after {RETRIES + 1} attempts (first: shard on 0)"
    monkeypatch.setenv("BADC_STALL_S", "soon")
    with pytest.raises(CampaignError, match="BADC_STALL_S must be a number of seconds >= 0, not 'soon'"):
        run_campaign(load_campaign(path), tmp_path / "out2", **QUIET)


def test_progress_shows_the_campaign_share_and_time_left(monkeypatch, tmp_path):
    from badc_check.campaign import progress as camp

    clock = [1000.0]
    monkeypatch.setattr(camp.time, "monotonic", lambda: clock[0])
    lines = []
    p = camp.Progress(log=lines.append, totals={("A", "off"): 1000, ("A", "on"): 1000}, done={("A", "off"): 1000})
    p.begin("A", "on")  # 1,000 draws were done by an earlier run: they do not count towards this run's rate
    clock[0] += 30
    p.update("A", "on", 0, 100)
    assert lines[-1].endswith("| campaign 55.0% of 2,000")  # no estimate in the first minute
    clock[0] += 90
    p.update("A", "on", 0, 400, final=True)  # 400 draws in 120 s: 600 left take 180 s
    assert lines[-1].endswith("| campaign 70.0% of 2,000, ~3 min left") and "400/1,000" in lines[-1]
    p.totals[("B", "on")] = 10_000_000
    p.update("A", "on", 0, 0, final=True)
    assert lines[-1].endswith(", ~833.4 h left")
    # A shard that goes on from an earlier run's checkpoint: the draws it took over are not this run's.
    p = camp.Progress(log=lines.append, totals={("A", "on"): 1000})
    p.begin("A", "on")
    p.update("A", "on", 0, 300, resumed=True)
    clock[0] += 60
    p.update("A", "on", 0, 400)  # 100 draws in 60 s: 600 left take 360 s
    assert lines[-1].endswith("| campaign 40.0% of 1,000, ~6 min left")
    # With finished shards timed (earlier runs' too), the estimate is their worker time per draw: 2
    # workers, 1,000 draws that took 100 worker-seconds, 600 draws left: 30 s, from the first update.
    (tmp_path / "a.json").write_text(json.dumps({"count": 500, "resumed": 0, "elapsed_s": 40.0}))
    (tmp_path / "b.json").write_text(json.dumps({"count": 700, "resumed": 200, "elapsed_s": 60.0}))
    (tmp_path / "c.json").write_text("{")  # torn: left out
    p = camp.Progress(log=lines.append, totals={("A", "on"): 1000}, workers=2)
    for name in ("a", "b", "c", "missing"):
        p.timed(tmp_path / f"{name}.json")
    p.begin("A", "on")
    p.update("A", "on", 0, 400)
    assert lines[-1].endswith("| campaign 40.0% of 1,000, ~30 s left") and (p.shard_s, p.shard_draws) == (100, 1000)
    p.totals[("A", "on")] = 3_000_000
    p.update("A", "on", 0, 400, final=True)
    assert lines[-1].endswith(", ~41.7 h left")  # 2,999,600 draws at 0.05 s per draw
    # Each arm at its own finished shards' cost, not the mean of all (0.275 s here: 2,100 draws left
    # would take ~5 min): 2,000 draws of "on" at 0.05 s and 100 "repaired" at 0.5 s on 2 workers, 75 s.
    (tmp_path / "on.json").write_text(json.dumps({"id": "A", "arm": "on", "count": 1000, "elapsed_s": 50.0}))
    (tmp_path / "r.json").write_text(json.dumps({"id": "A", "arm": "repaired", "count": 1000, "elapsed_s": 500.0}))
    p = camp.Progress(log=lines.append, totals={("A", "on"): 3000, ("A", "repaired"): 1100},
                      done={("A", "on"): 1000, ("A", "repaired"): 1000}, workers=2)
    for name in ("on", "r"):
        p.timed(tmp_path / f"{name}.json")
    p.begin("A", "repaired")
    p.update("A", "repaired", 1000, 0)
    assert lines[-1].endswith("| campaign 48.8% of 4,100, ~75 s left")
    # An arm not yet timed is priced by its config's timed arms, else its engine's, else all: 1,000 draws
    # each of a fast engine's confirmation arm (its config's off arm: 0.001 s), a config on the same build
    # with nothing timed (0.001 s), and a config of an engine with nothing timed (the mean, 0.1005 s), on
    # 2 workers: 1 + 1 + 100.5 worker-seconds, ~51 s. Priced by the mean, all three would take ~151 s.
    (tmp_path / "fast.json").write_text(json.dumps({"id": "F", "arm": "off", "count": 1000, "elapsed_s": 1.0}))
    (tmp_path / "slow.json").write_text(json.dumps({"id": "S", "arm": "on", "count": 1000, "elapsed_s": 200.0}))
    p = camp.Progress(log=lines.append, totals={("F", "off"): 1000, ("F", "on-confirm"): 1000, ("G", "on"): 1000,
                                                ("S", "on"): 1000, ("X", "on"): 1000},
                      done={("F", "off"): 1000, ("S", "on"): 1000}, workers=2,
                      engines={"F": "fast-1", "G": "fast-1", "S": "slow-1", "X": "other-1"})
    for name in ("fast", "slow"):
        p.timed(tmp_path / f"{name}.json")
    p.begin("F", "on-confirm")
    p.update("F", "on-confirm", 0, 0)
    assert lines[-1].endswith("| campaign 40.0% of 5,000, ~51 s left")
    # The arm's own rate leaves out both its shards done by an earlier run and a checkpoint's draws.
    p = camp.Progress(log=lines.append, totals={("A", "on"): 1000}, done={("A", "on"): 500})
    p.begin("A", "on")
    p.update("A", "on", 500, 300, resumed=True)
    clock[0] += 60
    p.update("A", "on", 500, 420)  # 120 draws in 60 s
    assert "920/1,000 2 draws/s |" in lines[-1]
    # A config stopped at an early look (--anytime): its arms' later shards leave the total and the time
    # left; a shard of it still running counts when it lands. 2 workers at 0.05 s per draw, 1,000 left.
    p = camp.Progress(log=lines.append, totals={("A", "on"): 8000, ("A", "off"): 8000, ("B", "on"): 2000},
                      done={("A", "on"): 1000, ("A", "off"): 1000, ("B", "on"): 1000}, workers=2)
    p.timed(tmp_path / "on.json")
    p.begin("B", "on")
    p.update("A", "on", 1000, 500)
    p.settle("A")
    clock[0] += 10
    p.update("B", "on", 1000, 0)
    assert lines[-1].endswith("| campaign 77.8% of 4,500, ~25 s left")
    p.update("A", "on", 1000, 1000, final=True)
    assert lines[-1].endswith("| campaign 80.0% of 5,000, ~25 s left") and "2,000/2,000" in lines[-1]


VARIANTS = """
[campaign]
name = "transfer"
draws = 1500
seed = 3
shard = 500

[defaults]
engine = "toy"
build = "0.1.0"
max_new_tokens = 4
processors = [{{ name = "min_tokens", min_tokens = 3 }}]
defects = ["D1"]
predicates = ["min_tokens"]
hypothesis = "H-D1"

[[config]]
id = "PAR"
variants = {variants}
"""


def test_variants_expand_a_config_over_models_and_prompts_before_the_seal(tmp_path):
    # Held-out transfer: one config per variant (only the model and the prompt change), ids ID-V1.., each
    # sealed and decided in the roster's m; the planted defect is found on every variant.
    three = '[{ model = "tiny:2" }, { model = "tiny:3", prompt = [1, 2, 3, 1, 2] }, {}]'
    path = _write(tmp_path, VARIANTS.format(variants=three))
    campaign = load_campaign(path)
    assert [c["id"] for c in campaign.configs] == ["PAR-V1", "PAR-V2", "PAR-V3"] and campaign.m == 3
    assert [(c.get("model"), c.get("prompt"), c["variant_of"]) for c in campaign.configs] == [
        ("tiny:2", None, "PAR"), ("tiny:3", [1, 2, 3, 1, 2], "PAR"), (None, None, "PAR")]
    assert all("variants" not in c and c["defects"] == ["D1"] for c in campaign.configs)
    report = run_campaign(campaign, tmp_path / "out", workers=2, **QUIET)
    assert [(c["id"], c["decision"]) for c in report["configs"]] == [(f"PAR-V{i}", "FAILS") for i in (1, 2, 3)]
    assert report["configs"][1]["variant"] == {"of": "PAR", "model": "tiny:3", "prompt": [1, 2, 3, 1, 2]}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "- held-out variant of PAR: model 'tiny:3', prompt [1, 2, 3, 1, 2]" in md
    laws = {c["id"]: json.loads((tmp_path / "out" / "laws" / f"{c['id']}.json").read_text())["reference"]
            for c in campaign.configs}
    assert laws["PAR-V1"] != laws["PAR-V2"] != laws["PAR-V3"]  # held-out: other models, other prompts
    # a variant that retunes anything else, or an empty list, is refused before anything is sealed
    for bad, said in (('[{ model = "tiny:2", max_new_tokens = 3 }]', r"variants\[0\]\.max_new_tokens.*only model"),
                      ("[]", "non-empty array"), ('[{ model = "tiny:x" }]', "variant PAR-V1: .*model")):
        with pytest.raises(CampaignError, match=said):
            load_campaign(_write(tmp_path, VARIANTS.format(variants=bad), "bad.toml"))


def test_a_laws_chain_computes_each_configs_laws_and_one_failure_leaves_the_others(tmp_path):
    # configs on one build and model share one worker for their laws (one engine start); a config whose
    # laws fail there fails alone, and the worker exits non-zero so that the runner retries it
    from badc_check.campaign.plan import Chain, Job

    camp = load_campaign(_write(tmp_path, CAMPAIGN.format(other="toy")))
    good = {c["id"]: c for c in camp.configs}
    broken = {**good["PAR"], "id": "BROKEN", "hypothesis": "H-NOT-THERE"}
    out = tmp_path / "out"
    (out / "configs").mkdir(parents=True)
    for c in (broken, good["NEG"], good["PAR"]):
        (out / "configs" / f"{c['id']}.json").write_text(json.dumps(c))
    chain = Chain([Job(broken, "laws"), Job(good["NEG"], "laws"), Job(good["PAR"], "laws")])
    cmd = chain.command(sys.executable, out / "configs" / "BROKEN.json", out, camp.seed, "s")
    assert cmd[3:6] == [str(out / "configs" / f"{cid}.json") for cid in ("BROKEN", "NEG", "PAR")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 1 and "laws of config 'BROKEN' failed" in proc.stderr and "H-NOT-THERE" in proc.stderr
    assert sorted(p.name for p in (out / "laws").iterdir()) == ["NEG.json", "PAR.json"]
    alone = json.loads((out / "laws" / "PAR.json").read_text())
    (out / "laws" / "PAR.json").unlink()
    proc = subprocess.run(Job(good["PAR"], "laws").command(sys.executable, out / "configs" / "PAR.json", out,
                                                           camp.seed, "s"), capture_output=True, text=True)
    assert proc.returncode == 0 and json.loads((out / "laws" / "PAR.json").read_text())["reference"] == \
        alone["reference"]


def test_a_second_run_on_a_folder_in_use_is_refused_before_it_runs_anything(tmp_path):
    # two runs on one folder would run every job twice and write the same files from two processes
    from badc_check.campaign.run import hold_folder

    path = _write(tmp_path, CAMPAIGN.format(other="toy"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "RUNNING").write_text("4242")
    held = hold_folder(out)
    try:
        with pytest.raises(CampaignError, match="being run by another badc run .pid 4242"):
            run_campaign(load_campaign(path), out, **QUIET)
        assert not (out / "seal.json").exists()
    finally:
        held.close()
    assert run_campaign(load_campaign(path), out, **QUIET)["configs"]  # free again once the first ends


def _toy_config(cid="W1"):
    return {"id": cid, "engine": "toy", "build": "0.1.0", "model": "tiny", "max_new_tokens": 3,
            "drafter": {"method": "prompt_lookup", "num_tokens": 3, "max_ngram_size": 2},
            "processors": [{"name": "min_tokens", "min_tokens": 2}]}


def test_a_validating_worker_runs_its_builds_first_job_and_one_never_given_a_job_exits(tmp_path):
    """The runner keeps each build's validating worker (`--validate --serve`) for that build's first job,
    so the engine is imported once for both; an engine printing on stdout while it is imported does not
    hide the verdict; a worker no job is given exits, having run nothing; one that cannot validate says why."""
    from badc_check.campaign.executors import WarmWorkers
    from badc_check.campaign.plan import Job
    from badc_check.campaign.spec import CampaignError
    from badc_check.campaign.validate import _problems

    noisy = tmp_path / "python"  # an interpreter whose engine prints on stdout as it starts
    noisy.write_text(f"#!/bin/sh\necho 'engine banner'\nexec {sys.executable} \"$@\"\n")
    noisy.chmod(0o755)
    config = _toy_config()
    (tmp_path / "W1.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    with WarmWorkers() as warm:
        assert _problems(str(noisy), [config], warm) == {"W1": {"problems": [], "refused": None}}
        waiting = warm._waiting[str(noisy)].proc
        cmd = Job(config, "exact", soundness=5).command(str(noisy), tmp_path / "W1.json", out, seed=3)
        proc, lines = warm.take(cmd)
        assert proc is waiting  # the job runs in the validating process: no second engine start
        said = list(lines)
        assert proc.wait() == 0, said
        assert any(line.startswith("exact W1 ") for line in said)
        assert json.loads((out / "exact" / "W1.json").read_text())["on"]
        assert warm.take(cmd) is None  # taken once: a later job starts its own worker

        assert _problems(sys.executable, [config], warm)["W1"]["problems"] == []
        idle = warm._waiting[sys.executable].proc
    assert idle.wait(timeout=30) == 0 and not (out / "laws").exists()  # told to exit by the end of the `with`
    with WarmWorkers() as warm, pytest.raises(CampaignError, match="validating engine keywords under .* failed"):
        _problems(sys.executable, [{"id": "X", "engine": "no-such-engine"}], warm)
