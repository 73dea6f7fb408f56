"""Every committed findings trace replays to the verdict recorded for it (findings/replay-verdicts.json,
written by tools/findings_verdicts.py --write): a change to replay must leave them as they are (issue 50).
Each trace is replayed by `badc replay --json` under its build's interpreter, as a user's would be."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("findings_verdicts", ROOT / "tools" / "findings_verdicts.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)
RECORDED = json.loads(tool.RECORD.read_text())


def test_every_committed_trace_has_a_recorded_verdict():
    names = {p.relative_to(ROOT).as_posix() for p in tool.traces()}
    assert names == set(RECORDED)
    # the record decides something: violations found, contracts held, and what was left unchecked
    assert {v["exit"] for v in RECORDED.values()} == {0, 1, 3}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_the_trace_replays_to_its_recorded_verdict(name):
    assert tool.differences(RECORDED[name], tool.verdict(ROOT / name)) == []
