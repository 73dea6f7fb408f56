"""Collecting one arm of a configuration, the same way for every engine: probe the engine, draw with
the sealed per-draw seeds, close the trace, replay it against the contract, check returned records."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from badc_replay.contract import replay_trace
from badc_trace.format import TraceWriter
from badc_trace.instrument import BaseInstrumentor, TraceSink
from badc_trace.seeds import draw_seed


@dataclass
class ArmResult:
    outcomes: dict[str, int]
    proposed: int
    accepted: int
    violations: int  # draws (requests) whose replay found a contract violation
    contract: dict[str, Any] | None
    counters: dict[str, int]
    records: dict[str, Any] | None = None  # channel R counts: draws, mismatch, positions


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


def collect_arm(spec: ArmSpec, probe: BaseInstrumentor, setup: Callable[[], tuple[Callable[[int], str], Any]], *,
                engine: str, build: str, trace_config: dict[str, Any], trace_path: str | None, level: str,
                seal: str = "", progress: Callable[[int], None] | None = None, progress_every: int = 1000,
                records: Callable[[str], dict[str, Any]] | None = None, batch: int = 1) -> ArmResult:
    """`setup()` builds the engine under the probe and returns (draw(seed) -> outcome, undo or None);
    with `batch` > 1, draw takes a list of at most `batch` seeds and returns their outcomes (engines that
    batch requests). `records(trace_path)` checks returned records (channel R) after the contract replay."""
    writer = None
    if trace_path is not None:
        writer = TraceWriter(trace_path, engine=engine, build=build, seal=seal, config=trace_config)
    sink = TraceSink(writer, level if writer else "counts")
    probe.instrument(sink)
    probe._ids = itertools.count(spec.start)  # request ids are draw indices across shards
    undo = None
    try:
        draw, undo = setup()
        outcomes: Counter[str] = Counter()
        end = spec.start + spec.draws
        for lo in range(spec.start, end, batch):
            seeds = [draw_seed(spec.campaign_seed, spec.config_id, spec.seed_arm or spec.arm, i)
                     for i in range(lo, min(lo + batch, end))]
            outcomes.update(draw(seeds) if batch > 1 else [draw(seeds[0])])
            done = min(lo + batch, end) - spec.start
            if progress is not None and (done % progress_every == 0 or done == spec.draws):
                progress(done)
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
    return ArmResult(dict(outcomes), sink.counters["proposed"], sink.counters["accepted"], violations, contract,
                     dict(sink.counters), checked)
