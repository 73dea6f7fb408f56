"""While chains of shards draw, decide at every planned look their shards have reached and mark the
configs whose remaining draws are not needed, so that their chains begin no further shard. Under
--anytime (LookWatcher): a config a discovery look stopped (FAILS with eligible evidence, or VOID).
Under confirm_anytime (RecurrenceWatcher): the unrepaired confirmation arm of a config whose recurrence
a look showed. The report's results are made afterwards from the same shards (merge.anytime_decision,
merge.confirmation_reads); the marks only save draws."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from badc_check.campaign.merge import FolderDecision, confirmation_reads, decide_from_folder
from badc_check.campaign.plan import Job
from badc_check.campaign.spec import Campaign
from badc_check.decide import should_stop
from badc_check.looks import planned_looks

POLL_S = 0.5


class StopWatcher:
    """A thread that asks `check(cid)` about each config not yet stopped as its shards land, and marks
    the `arms` of those whose check returns a message (said in the log) so their chains stop (a context
    manager)."""

    arms: tuple[str, ...] = ()  # the arms whose chains a mark stops

    def __init__(self, jobs: dict[str, list[Job]], out: Path, log: Callable[[str], None],
                 on_stop: Callable[[str, tuple[str, ...]], None] = lambda cid, arms: None):
        self.jobs, self.out, self.log = jobs, out, log
        self.on_stop = on_stop  # told each config it stops, and which arms
        self.stop_dir = out / ".stop"
        self.stopped: set[str] = set()
        self._unwatched: set[str] = set()  # a check raised: the final decision reports it
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="badc-looks", daemon=True)

    def check(self, cid: str) -> str | None:
        raise NotImplementedError

    def stop_file(self, cid: str) -> Path:
        return self.stop_dir / cid

    def stops(self, job: Job) -> bool:
        """Whether the job is a shard this watcher has stopped."""
        return job.kind == "shard" and job.arm in self.arms and job.cid in self.stopped

    def __enter__(self) -> StopWatcher:
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
        for cid in self.jobs:
            if cid in self.stopped or cid in self._unwatched:
                continue
            try:
                said = self.check(cid)
            except Exception:  # noqa: BLE001 - the final decision, from the same files, reports it
                self._unwatched.add(cid)
                continue
            if said:
                self.stopped.add(cid)
                self.stop_file(cid).touch()
                self.on_stop(cid, self.arms)
                self.log(said)


class LookWatcher(StopWatcher):
    """--anytime: decides each config at every discovery look both of its arms have reached, up to the one
    before the last (the last look ends the chains anyway)."""

    arms = ("on", "off")

    def __init__(self, jobs: dict[str, list[Job]], out: Path, campaign: Campaign, m: int,
                 log: Callable[[str], None], on_stop: Callable[[str, tuple[str, ...]], None] = lambda cid, arms: None):
        super().__init__(jobs, out, log, on_stop)
        self.campaign, self.m = campaign, m
        self.looks = planned_looks(campaign.draws)
        self.evaluated = dict.fromkeys(jobs, 0)  # looks decided so far (none stopped)

    def check(self, cid: str) -> str | None:
        jobs = self.jobs[cid]
        if not jobs[0].output(self.out).exists():
            return None
        while self.evaluated[cid] < len(self.looks) - 1:
            look = self.looks[self.evaluated[cid]]
            prefix = [j for j in jobs[1:] if j.arm in ("on", "off") and j.start < look.draws]
            if any(not j.output(self.out).exists() for j in prefix):
                return None
            found = decide_from_folder(jobs[0].config, [jobs[0], *prefix], self.out, self.campaign, self.m,
                                       look=look)
            self.evaluated[cid] += 1
            if should_stop(found.decision):
                return f"{cid}: {found.decision.decision} at {look}: its remaining shards are not needed"
        return None


class RecurrenceWatcher(StopWatcher):
    """confirm_anytime: judges each config's recurrence at every confirmation look its fresh unrepaired
    arms have reached, and stops the unrepaired (on-confirm) arm at the first that recurs."""

    arms = ("on-confirm",)

    def __init__(self, jobs: dict[str, list[Job]], found: dict[str, FolderDecision], out: Path,
                 campaign: Campaign, log: Callable[[str], None],
                 on_stop: Callable[[str, tuple[str, ...]], None] = lambda cid, arms: None):
        super().__init__(jobs, out, log, on_stop)
        self.found, self.campaign = found, campaign
        self._seen = dict.fromkeys(jobs, -1)  # shards written when last judged: judge again only when more are

    def check(self, cid: str) -> str | None:
        written = sum(j.output(self.out).exists() for j in self.jobs[cid] if j.arm in ("on-confirm", "off-confirm"))
        if written == self._seen[cid]:
            return None
        self._seen[cid] = written
        reads = confirmation_reads(self.found[cid], self.jobs[cid], self.out, self.campaign)
        if reads is None or reads[1] is None or reads[1].index == reads[1].of:
            return None
        return f"{cid}: the unrepaired arm recurs at {reads[1]}: its remaining on-confirm shards are not needed"
