"""Collecting one arm of a configuration, the same way for every engine: probe the engine, draw with
the sealed per-draw seeds, close the trace, replay it against the contract, check returned records.

With a trace, collection is resumable: every CHECKPOINT_S seconds (`BADC_CHECKPOINT_S`), between draws,
the counts so far and the trace's position go to `TRACE.resume` (written atomically). A run killed
mid-way and started again with the same arguments goes on from there, cutting the trace back to that
position, so it loses at most that long of work. Each draw's seed depends on its index only, so the
result is the same as one run's."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from badc_replay.contract import replay_trace
from badc_trace.format import TraceWriter
from badc_trace.instrument import BaseInstrumentor, TraceSink
from badc_trace.seeds import draw_seed

CHECKPOINT_S = 30.0


@dataclass
class ArmResult:
    outcomes: dict[str, int]
    proposed: int
    accepted: int
    violations: int  # draws (requests) whose replay found a contract violation
    contract: dict[str, Any] | None
    counters: dict[str, int]
    records: dict[str, Any] | None = None  # channel R counts: draws, mismatch, positions
    resumed: int = 0  # draws taken over from an interrupted run's checkpoint


@dataclass(frozen=True)
class ArmSpec:
    """Which draws of which arm: draws `start .. start + draws - 1`, seeded as `seed_arm` (default the
    arm itself; a repaired arm on the on-arm's seeds gives `badc diff` the same draws)."""

    config_id: str
    arm: str
    draws: int
    campaign_seed: int
    start: int = 0
    seed_arm: str | None = None


class _Checkpoint:
    """`TRACE.resume`: how far one collection got. It is used only by the same collection: its key
    hashes everything that decides the draws and the records."""

    def __init__(self, trace_path: str, key: dict[str, Any]):
        self.path = Path(trace_path + ".resume")
        self.key = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()

    def load(self) -> dict[str, Any] | None:
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) and state.get("key") == self.key else None

    def save(self, done: int, outcomes: Counter[str], counters: dict[str, int], writer: TraceWriter) -> None:
        offset, records = writer.position()
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps({"key": self.key, "done": done, "outcomes": outcomes,
                                   "counters": counters, "trace": [offset, records]}))
        os.replace(tmp, self.path)

    def drop(self) -> None:
        self.path.unlink(missing_ok=True)


def env_seconds(name: str, default: float) -> float:
    """A number of seconds >= 0 from the environment variable `name`, else `default`; ValueError naming it."""
    raw = os.environ.get(name, str(default))
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, not {raw!r}")
    return seconds


def checkpoint_interval() -> float:
    """Seconds between checkpoints: BADC_CHECKPOINT_S, or CHECKPOINT_S."""
    return env_seconds("BADC_CHECKPOINT_S", CHECKPOINT_S)


def collect_arm(spec: ArmSpec, probe: BaseInstrumentor, setup: Callable[[], tuple[Callable[[int], str], Any]], *,
                engine: str, build: str, trace_config: dict[str, Any], trace_path: str | None, level: str,
                seal: str = "", progress: Callable[..., None] | None = None, progress_every: int = 1000,
                records: Callable[[str], dict[str, Any]] | None = None, batch: int = 1) -> ArmResult:
    """`setup()` builds the engine under the probe and returns (draw(seed) -> outcome, undo or None);
    with `batch` > 1, draw takes a list of at most `batch` seeds and returns their outcomes (engines that
    batch requests). `progress(done)` is called every `progress_every` draws, and `progress(done, True)`
    once for the draws a checkpoint holds. `records(trace_path)` checks returned records (channel R)
    after the contract replay."""
    every = checkpoint_interval()
    writer = checkpoint = saved = None
    if trace_path is not None:
        checkpoint = _Checkpoint(trace_path, {"spec": dataclasses.asdict(spec), "engine": engine, "build": build,
                                              "config": trace_config, "level": level, "seal": seal,
                                              "batch": batch})
        saved = checkpoint.load()
        try:
            writer = TraceWriter(trace_path, engine=engine, build=build, seal=seal, config=trace_config,
                                 resume_at=tuple(saved["trace"]) if saved else None)
        except (OSError, ValueError):  # the trace is gone or shorter than the checkpoint says: start over
            saved = None
            writer = TraceWriter(trace_path, engine=engine, build=build, seal=seal, config=trace_config)
    sink = TraceSink(writer, level if writer else "counts")
    done = resumed = 0
    outcomes: Counter[str] = Counter()
    if saved:
        done = resumed = saved["done"]
        outcomes.update(saved["outcomes"])
        sink.counters.update(saved["counters"])
    probe.instrument(sink)
    probe._ids = itertools.count(spec.start + done)  # request ids are draw indices
    undo = None
    try:
        draw, undo = setup()
        if done and progress is not None:
            progress(done, True)
        last = time.monotonic()
        end = spec.start + spec.draws
        for lo in range(spec.start + done, end, batch):
            seeds = [draw_seed(spec.campaign_seed, spec.config_id, spec.seed_arm or spec.arm, i)
                     for i in range(lo, min(lo + batch, end))]
            outcomes.update(draw(seeds) if batch > 1 else [draw(seeds[0])])
            done = min(lo + batch, end) - spec.start
            if progress is not None and (done % progress_every == 0 or done == spec.draws):
                progress(done)
            if checkpoint is not None and done < spec.draws and time.monotonic() - last >= every:
                sink.flush()  # the records of the draws done, before the trace position is taken
                checkpoint.save(done, outcomes, sink.counters, writer)
                last = time.monotonic()
    finally:
        probe.uninstrument()
        sink.close()
        if callable(undo):
            undo()
    contract = None
    violations = 0
    checked = None
    if trace_path is not None and level != "counts":
        res = replay_trace(trace_path)
        contract = res.to_dict()
        violations = len(res.violating_requests)
        if records is not None:
            checked = records(trace_path)
    if checkpoint is not None:
        checkpoint.drop()
    return ArmResult(dict(outcomes), sink.counters["proposed"], sink.counters["accepted"], violations, contract,
                     dict(sink.counters), checked, resumed)
