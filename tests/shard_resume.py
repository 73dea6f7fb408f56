"""Kill a campaign worker in the middle of a shard and run it again: the shard must go on from its
checkpoint and come out draw for draw as an uninterrupted run's."""

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from badc_trace.format import read_trace

START = 1000  # not 0, so request ids are seen to be draw indices


def _records(path: Path, history: tuple[str, str] | None) -> list[dict[str, Any]]:
    reader = read_trace(path)
    recs = []
    for r in reader:
        if history and r["type"] == history[0]:
            continue
        if r["type"] == "vocab" and any(q["type"] == "vocab" for q in recs):
            continue  # each process writes the tokenizer's pieces once: a resumed shard's second process too
        if "setup" in r:  # recorded arguments: their bytes go with the first request of each process, then the key
            r = {**r, "setup": {k: v for k, v in r["setup"].items() if k != "blob"}}
        recs.append({k: v for k, v in r.items() if k != history[1]} if history and r["type"] == "counts" else r)
    assert reader.complete and reader.torn_tail is None, path
    return recs


def kill_and_resume(python: str, config: dict[str, Any], folder: Path, *, arm: str, count: int, level: str,
                    kill_after: int, history: tuple[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run draws START .. START+count-1 of one arm twice: once straight through, once killed (SIGKILL)
    when its checkpoint holds at least `kill_after` draws, then run again. Checks the resumed trace and
    returns both shard results. `history`, a record type and its counter, names what depends on the
    process's past rather than on the draws (llama.cpp's prompt cache: the first request after any
    start evaluates the prompt afresh), left out of the comparison."""
    cfg_path = folder / "config.json"
    cfg_path.write_text(json.dumps(config))
    name = f"{arm}-{START}"

    def cmd(out: Path) -> list[str]:
        return [python, "-m", "badc_replay.worker", str(cfg_path), "--out", str(out), "--arm", arm,
                "--start", str(START), "--count", str(count), "--seed", "5", "--level", level, "--seal", "s"]

    ref, cut = folder / "straight", folder / "cut"
    subprocess.run(cmd(ref), check=True, capture_output=True)
    env = {**os.environ, "BADC_CHECKPOINT_S": "0"}  # a checkpoint after every draw
    proc = subprocess.Popen(cmd(cut), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = cut / "traces" / config["id"] / f"{name}.badc.resume"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if checkpoint.exists() and json.loads(checkpoint.read_text())["done"] >= kill_after:
            break
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    shard = cut / "shards" / config["id"] / f"{name}.json"
    assert checkpoint.exists() and not shard.exists(), "the worker finished before it could be killed"
    subprocess.run(cmd(cut), check=True, env=env, capture_output=True)
    assert not checkpoint.exists()

    ref_recs, cut_recs = (_records(o / "traces" / config["id"] / f"{name}.badc", history) for o in (ref, cut))
    assert cut_recs == ref_recs  # the same records in the same order: nothing twice, nothing lost
    assert sorted({r["req"] for r in cut_recs if "req" in r}) == list(range(START, START + count))
    results = []
    for path in (ref / "shards" / config["id"] / f"{name}.json", shard):
        res = json.loads(path.read_text())
        if history:
            res["counters"].pop(history[1])
        results.append(res)
    return results[0], results[1]


def same_shard(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal in everything a decision reads (not in timing or provenance)."""
    skip = {"elapsed_s", "cpu_s", "resumed"}
    return {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}
