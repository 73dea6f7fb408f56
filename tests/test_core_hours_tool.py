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
