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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from badc_replay.contract import replay_trace
from badc_replay.engine import Engine
from badc_replay.repairs import load_intervention
from badc_trace.files import write_json
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
        write_json(self.path, {"key": self.key, "done": done, "outcomes": outcomes, "counters": counters,
                               "trace": [offset, records]})

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
                engine: str | Engine, build: str, trace_config: dict[str, Any], trace_path: str | None, level: str,
                seal: str = "", progress: Callable[..., None] | None = None, progress_every: int = 1000,
                records: Callable[[str], dict[str, Any]] | None = None, batch: int = 1,
                replay: bool = True) -> ArmResult:
    """`setup()` builds the engine under the probe and returns (draw(seed) -> outcome, undo or None);
    with `batch` > 1, draw takes a list of at most `batch` seeds and returns their outcomes (engines that
    batch requests). `progress(done)` is called every `progress_every` draws, and `progress(done, True)`
    once for the draws a checkpoint holds. `records(trace_path)` checks returned records (channel R)
    after the contract replay, with `engine`'s contract (given by name: the registered engine's).
    `replay=False` writes the trace and leaves it unchecked (the result has no contract): tools/bench.py
    times the draw loop that way."""
    replayer = engine if isinstance(engine, Engine) else None
    engine = engine.name if isinstance(engine, Engine) else engine
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
    if trace_path is not None and level != "counts" and replay:
        res = replay_trace(trace_path, engine=replayer)
        contract = res.to_dict()
        violations = len(res.violating_requests)
        if records is not None:
            checked = records(trace_path)
    if checkpoint is not None:
        checkpoint.drop()
    return ArmResult(dict(outcomes), sink.counters["proposed"], sink.counters["accepted"], violations, contract,
                     dict(sink.counters), checked, resumed)


def collect(engine: Engine, cfg: Any, arm: str, draws: int, campaign_seed: int, *, trace_path: str | None = None,
            level: str | None = None, repair: str | None = None, start: int = 0,
            progress: Callable[..., None] | None = None, seed_arm: str | None = None,
            seal: str = "", applied: Sequence[str] = (), replay: bool = True) -> ArmResult:
    """Draws `start .. start + draws - 1` of one arm of `engine`'s config (`off*` without speculation, `on*`,
    `repaired`), probed and traced; the trace is replayed against the engine's contract (level calls or full).
    `applied` are frozen repairs taken as part of the build under test (every arm gets them, in order,
    before the arm's own `repair`); the trace header names them.
    `seed_arm` draws with another arm's seeds (a repaired arm on the on arm's seeds, for `badc diff`)."""
    made: dict[str, Any] = {}
    patches = [*applied, *([repair] if repair is not None else [])]

    def setup() -> tuple[Callable[..., Any], Any]:
        h = made["h"] = process_harness(engine, cfg, arm, patches)
        undos = [load_intervention(rid).apply(h.repair_target) for rid in patches]

        def undo() -> None:  # the last applied first
            for u in reversed(undos):
                if callable(u):
                    u()
        return h.draw, undo if undos else None

    check = None
    if engine.returns_records(cfg):
        def check(path: str) -> dict[str, Any]:
            return engine.check_records(cfg, made["h"], path)

    header = (engine.trace_config(cfg, arm) | ({"applied": list(applied)} if applied else {})
              | ({"repair": repair} if repair is not None else {}))  # a re-run in replay applies them too
    try:
        return collect_arm(ArmSpec(cfg.id, arm, draws, campaign_seed, start, seed_arm), engine.probe(), setup,
                           engine=engine, build=engine.version(), level=level or engine.trace_level, seal=seal,
                           trace_path=trace_path, trace_config=header, progress=progress,
                           progress_every=engine.progress_every, records=check, batch=engine.batch,
                           replay=replay)
    except BaseException:
        _last_harness.clear()  # an engine that failed a draw may not serve another
        raise


_last_harness: list[tuple[tuple[Any, ...], Any]] = []  # (engine, config, arm, patches) and the last shard's harness


def process_harness(engine: Engine, cfg: Any, arm: str, patches: Sequence[str] = ()) -> Any:
    """This process's harness for the config, arm and patches: the last one made, when it is for the
    same (the shards of a chain of --anytime looks), else a new one, kept for the next. Draws are
    seeded by their index; a chain's next shard meets the engine state (llama.cpp's KV cache) that
    every request after an arm's first already meets. Reuse saves the engine's start, and vLLM allows
    few engines per process. Keyed by arm and patches, not only by speculation: a repair may have no
    undo, and the state one arm leaves must not reach another arm's trace."""
    key = (engine.name, cfg, arm, tuple(patches))
    if not (_last_harness and _last_harness[0][0] == key):
        _last_harness.clear()
        _last_harness.append((key, engine.harness(cfg, speculative=not arm.startswith("off"))))
    return _last_harness[0][1]
