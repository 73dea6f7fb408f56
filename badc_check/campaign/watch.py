"""Under --anytime: while the arms' chains draw, decide each config at every planned look both of its
arms have reached, and mark the configs a look stopped (FAILS with eligible evidence, or VOID), so that
their chains begin no further shard. The report's decisions are made afterwards from the same shards
(merge.anytime_decision); the marks only save draws."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from badc_check.campaign.merge import decide_from_folder
from badc_check.campaign.plan import Job
from badc_check.campaign.spec import Campaign
from badc_check.decide import should_stop
from badc_check.looks import planned_looks

POLL_S = 0.5


class LookWatcher:
    """A thread that decides the configs look by look as their shards land (a context manager)."""

    def __init__(self, jobs: dict[str, list[Job]], out: Path, campaign: Campaign, m: int,
                 log: Callable[[str], None], on_stop: Callable[[str], None] = lambda cid: None):
        self.jobs, self.out, self.campaign, self.m, self.log = jobs, out, campaign, m, log
        self.on_stop = on_stop  # told each config it stops
        self.looks = planned_looks(campaign.draws)
        self.stop_dir = out / ".stop"
        self.evaluated = dict.fromkeys(jobs, 0)  # looks decided so far (none stopped)
        self.stopped: set[str] = set()
        self._unwatched: set[str] = set()  # a decision raised: the final one reports it
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="badc-looks", daemon=True)

    def stop_file(self, cid: str) -> Path:
        return self.stop_dir / cid

    def __enter__(self) -> LookWatcher:
        shutil.rmtree(self.stop_dir, ignore_errors=True)  # an earlier run's marks
        self.stop_dir.mkdir(parents=True)
        self.poll()  # configs an earlier run decided are stopped before any chain is made, not a shard later
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()
        shutil.rmtree(self.stop_dir, ignore_errors=True)

    def _loop(self) -> None:
        while not self._done.wait(POLL_S):
            self.poll()

    def poll(self) -> None:
        """Decide every config at each look whose shards are all written, up to the one before the last
        (the last look ends the chains anyway)."""
        for cid, jobs in self.jobs.items():
            if cid in self.stopped or cid in self._unwatched or not jobs[0].output(self.out).exists():
                continue
            while self.evaluated[cid] < len(self.looks) - 1:
                look = self.looks[self.evaluated[cid]]
                prefix = [j for j in jobs[1:] if j.arm in ("on", "off") and j.start < look.draws]
                if any(not j.output(self.out).exists() for j in prefix):
                    break
                try:
                    found = decide_from_folder(jobs[0].config, [jobs[0], *prefix], self.out, self.campaign, self.m,
                                               look=look)
                except Exception:  # noqa: BLE001 - the final decision, from the same files, reports it
                    self._unwatched.add(cid)
                    break
                self.evaluated[cid] += 1
                if should_stop(found.decision):
                    self.stopped.add(cid)
                    self.stop_file(cid).touch()
                    self.on_stop(cid)
                    self.log(f"{cid}: {found.decision.decision} at {look}: its remaining shards are not needed")
                    break
