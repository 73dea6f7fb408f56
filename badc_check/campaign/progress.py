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
    engines: dict[str, str] = field(default_factory=dict)  # config id -> its engine and build, for pricing arms

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

    def _per_draw(self) -> Callable[[tuple[str, str]], float]:
        """Worker seconds a draw of an arm is priced at: its own finished shards', else its config's other
        arms', else those of its engine and build, else every finished shard's (earlier runs' included).
        Arms differ in cost several-fold (a repaired arm can take three times the campaign's mean) and
        engines a hundredfold (a tiny llama-cpp-python draw is under a millisecond, a transformers guidance
        draw tens), so an arm not yet timed is priced by its nearest timed kin, not by the campaign's mix."""
        def kin(cid: str) -> list[tuple[str, str]]:
            return [("config", cid)] + ([("engine", self.engines[cid])] if cid in self.engines else [])

        pools: dict[tuple[str, str], list[float]] = {}
        for (cid, _), (arm_s, arm_draws) in self.arm_timed.items():
            if arm_s > 0 and arm_draws > 0:
                for pool in kin(cid):
                    acc = pools.setdefault(pool, [0.0, 0])
                    acc[0], acc[1] = acc[0] + arm_s, acc[1] + arm_draws
        mean = self.shard_s / self.shard_draws

        def price(key: tuple[str, str]) -> float:
            arm_s, arm_draws = self.arm_timed.get(key, (0.0, 0))
            if arm_s > 0 and arm_draws > 0:
                return arm_s / arm_draws
            acc = next((pools[pool] for pool in kin(key[0]) if pool in pools), None)
            return acc[0] / acc[1] if acc else mean

        return price

    def _campaign(self, now: float) -> str:
        """The whole roster's share done and roughly how long is left: each arm's draws left at the worker
        time per draw of its nearest finished shards (`_per_draw`), or else at this run's rate so far (the
        run's rate alone misleads after a restart in a slow arm)."""
        total = sum(self._total(key) for key in self.totals)
        done = sum(self.done.values()) + sum(self.inflight.values())
        if not total or self.t0 is None:
            return ""
        left, s = "", None
        if self.workers and self.shard_draws > 0 and self.shard_s > 0:
            price = self._per_draw()
            s = sum(max(self._total(key) - self._drawn(key), 0) * price(key) for key in self.totals) / self.workers
        elif now - self.t0 >= 60 and done > self.reused:
            s = (total - done) / ((done - self.reused) / (now - self.t0))
        if s is not None:
            left = (f", ~{s:.0f} s left" if s < 90 else f", ~{s / 60:.0f} min left" if s < 5400
                    else f", ~{s / 3600:.1f} h left")
        return f" | campaign {100 * done / total:.1f}% of {total:,}{left}"
