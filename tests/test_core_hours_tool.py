"""tools/core_hours.py: a campaign folder's worker core-hours per engine, stage and arm, elapsed and CPU."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("core_hours", ROOT / "tools" / "core_hours.py")
core_hours = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(core_hours)


def _shard(folder, cid, arm, start, count, elapsed, cpu=None, resumed=0):
    path = folder / "shards" / cid / f"{arm}-{start}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    s = {"id": cid, "arm": arm, "start": start, "count": count, "resumed": resumed, "elapsed_s": elapsed}
    path.write_text(json.dumps(s if cpu is None else {**s, "cpu_s": cpu}))


def test_core_hours_add_each_shards_own_draws_and_say_which_lack_cpu_time(tmp_path, capsys):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "A.json").write_text(json.dumps({"id": "A", "engine": "toy"}))
    _shard(tmp_path, "A", "on", 0, 1000, 1800.0, cpu=900.0)
    _shard(tmp_path, "A", "on", 1000, 1000, 1800.0, cpu=1800.0, resumed=400)  # 600 drawn by this run
    _shard(tmp_path, "A", "repaired", 0, 500, 3600.0)  # written before cpu_s was recorded
    rows = core_hours.tally([tmp_path])
    assert rows["toy", "S1-S2", "on"] == [1600, 3600.0, 2700.0, 0]
    assert rows["toy", "S3", "repaired"] == [500, 3600.0, 0.0, 500]
    assert core_hours.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| toy | S1-S2 | on | 1,600 | 1.00 | 0.75 | 0 |" in out and "| all | | | 2,100 | 2.00 | 0.75 | 500 |" in out
    with pytest.raises(SystemExit, match="holds no shards"):
        core_hours.tally([tmp_path / "empty"])


def test_a_runs_draws_at_another_runs_cpu_per_draw(tmp_path, capsys):
    # a long run's own draws priced at a short run's CPU seconds per draw, per config and arm, each short
    # shard less one worker start-up; a config and arm the short run lacks is an error naming it
    old, short = tmp_path / "old", tmp_path / "short"
    for folder in (old, short):
        (folder / "configs").mkdir(parents=True)
        (folder / "configs" / "A.json").write_text(json.dumps({"id": "A", "engine": "toy"}))
    _shard(old, "A", "on", 0, 360_000, 99.0)
    _shard(old, "A", "repaired", 0, 7_200, 99.0)
    _shard(short, "A", "on", 0, 1000, 12.0, cpu=11.0)  # (11 - 1) s for 1,000 draws: 10 ms a draw
    _shard(short, "A", "on", 1000, 1000, 12.0, cpu=11.0)
    with pytest.raises(SystemExit, match="short has no CPU time for A repaired"):
        core_hours.at_rates([old], short, {"toy": 1.0})
    _shard(short, "A", "repaired", 0, 1000, 99.0, cpu=501.0)  # 0.5 s a draw
    est = core_hours.at_rates([old], short, {"toy": 1.0})
    assert est["toy", "S1-S2"] == pytest.approx(3600.0) and est["toy", "S3"] == pytest.approx(3600.0)
    assert core_hours.main([str(old), "--rates", str(short), "--startup", "toy=1"]) == 0
    assert "| toy | S1-S2 | 1.00 |" in capsys.readouterr().out
