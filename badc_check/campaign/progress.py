"""Progress of a campaign: draws done per (config, arm), one line per active arm drawn with tqdm's meter,
and the roster's share done with the time left."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm


@dataclass
class Progress:
    """Draws done per (config, arm), shown as one bar per active arm with draws per second."""

    totals: dict[tuple[str, str], int] = field(default_factory=dict)
    done: dict[tuple[str, str], int] = field(default_factory=dict)
    inflight: dict[tuple[str, str, int], int] = field(default_factory=dict)
    started: dict[tuple[str, str], float] = field(default_factory=dict)
    log: Callable[[str], None] = print
    last: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    t0: float | None = None  # first shard of this run
    reused: int = 0  # draws already done by an earlier run
    arm_reused: dict[tuple[str, str], int] = field(default_factory=dict)  # the same, per arm
    workers: int = 0  # shards running at once (0: unknown, e.g. on a Ray cluster)
    shard_s: float = 0.0  # worker-seconds of every finished shard, earlier runs' included,
    shard_draws: int = 0  # and the draws they timed
    arm_timed: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)  # the same, per arm
    settled: set[tuple[str, str]] = field(default_factory=set)  # arms decided early: what is drawn is all

    def settle(self, cid: str, arms: tuple[str, ...] = ("on", "off")) -> None:
        """A config decided at an early look (--anytime) draws none of its arms' later shards: they leave
        the roster's total and the time left (a shard still running finishes and counts)."""
        with self.lock:
            self.settled.update((cid, arm) for arm in arms if (cid, arm) in self.totals)

    def _total(self, key: tuple[str, str]) -> int:
        return self._drawn(key) if key in self.settled else self.totals.get(key, 0)

    def begin(self, cid: str, arm: str) -> None:
        with self.lock:
            now = time.monotonic()
            self._start((cid, arm), now)
            if self.t0 is None:
                self.t0, self.reused = now, sum(self.done.values())

    def timed(self, shard: Path) -> None:
        """Count a finished shard's worker time (its JSON's `elapsed_s`, for the draws it did itself)."""
        try:
            d = json.loads(shard.read_text())
            elapsed, draws = float(d["elapsed_s"]), int(d["count"]) - int(d.get("resumed", 0))
        except (OSError, ValueError, KeyError, TypeError):
            return  # an estimate only: a shard without timings is left out
        with self.lock:
            self.shard_s, self.shard_draws = self.shard_s + elapsed, self.shard_draws + draws
            if "id" in d and "arm" in d:
                s, n = self.arm_timed.get((d["id"], d["arm"]), (0.0, 0))
                self.arm_timed[(d["id"], d["arm"])] = (s + elapsed, n + draws)

    def _start(self, key: tuple[str, str], now: float) -> None:
        # an arm's rate counts from its first shard in this run, without the draws earlier runs did
        if key not in self.started:
            self.started[key], self.arm_reused[key] = now, self.done.get(key, 0)

    def update(self, cid: str, arm: str, start: int, n: int, final: bool = False, resumed: bool = False) -> None:
        """`n` draws of the shard at `start` are done (`final`: all of them); `resumed`: a checkpoint of
        an earlier run held them, so they do not count toward this run's rate."""
        with self.lock:
            key = (cid, arm)
            self._start(key, time.monotonic())
            if resumed:
                self.reused += n
                self.arm_reused[key] += n
            if final:
                self.inflight.pop((cid, arm, start), None)
                self.done[key] = self.done.get(key, 0) + n
            else:
                self.inflight[(cid, arm, start)] = n
            now = time.monotonic()
            if final or now - self.last >= 5:
                self.last = now
                self._show(key)

    def _drawn(self, key: tuple[str, str]) -> int:
        return self.done.get(key, 0) + sum(v for (c, a, _), v in self.inflight.items() if (c, a) == key)

    def _show(self, key: tuple[str, str]) -> None:
        total = self._total(key)
        n = self._drawn(key)
        now = time.monotonic()
        elapsed = max(now - self.started[key], 1e-9)
        rate = (n - self.arm_reused[key]) / elapsed
        bar = tqdm.format_meter(n, total or n or 1, elapsed, ncols=26, bar_format="{bar}", ascii=".#")
        self.log(f"{key[0]:>12} {key[1]:<11} [{bar}] {n:>9,}/{total:,} {rate:,.0f} draws/s{self._campaign(now)}")

    def _campaign(self, now: float) -> str:
        """The whole roster's share done and roughly how long is left: each arm's draws left at the worker
        time per draw of its own finished shards, or of every finished shard while it has none, earlier
        runs' included (arms differ in cost several-fold: a repaired arm can take three times the
        campaign's mean, and this run's rate alone misleads after a restart in a slow arm), or else at
        this run's rate so far."""
        total = sum(self._total(key) for key in self.totals)
        done = sum(self.done.values()) + sum(self.inflight.values())
        if not total or self.t0 is None:
            return ""
        left, s = "", None
        if self.workers and self.shard_draws > 0 and self.shard_s > 0:
            mean = self.shard_s / self.shard_draws
            s = 0.0
            for key in self.totals:
                n = self._total(key)
                arm_s, arm_draws = self.arm_timed.get(key, (0.0, 0))
                s += max(n - self._drawn(key), 0) * (arm_s / arm_draws if arm_s > 0 and arm_draws > 0 else mean)
            s /= self.workers
        elif now - self.t0 >= 60 and done > self.reused:
            s = (total - done) / ((done - self.reused) / (now - self.t0))
        if s is not None:
            left = (f", ~{s:.0f} s left" if s < 90 else f", ~{s / 60:.0f} min left" if s < 5400
                    else f", ~{s / 3600:.1f} h left")
        return f" | campaign {100 * done / total:.1f}% of {total:,}{left}"
