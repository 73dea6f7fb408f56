"""Executors: jobs run as local worker processes under each build's interpreter, as Ray tasks, or in
this process (the pytest plugin's way)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from badc_check.campaign.plan import Chain, Job
from badc_check.campaign.progress import Progress
from badc_check.campaign.spec import CampaignError
from badc_replay.arms import env_seconds
from badc_replay.worker import VERDICT

STALL_S = 1800.0  # a shard with no progress line for this long is taken as hung (BADC_STALL_S; 0: never)


def stall_limit() -> float:
    """Seconds a shard may go without a progress line before it is killed: BADC_STALL_S, or STALL_S."""
    try:
        return env_seconds("BADC_STALL_S", STALL_S)
    except ValueError as e:
        raise CampaignError(str(e)) from None


def _watch(proc: subprocess.Popen, last: list[float], limit: float, stalled: threading.Event) -> None:
    while proc.poll() is None:
        if time.monotonic() - last[0] > limit:
            stalled.set()
            proc.kill()
            return
        time.sleep(min(5.0, limit / 10))


WORKER = ["-m", "badc_replay.worker"]


@dataclass
class _Waiting:
    proc: subprocess.Popen
    lines: queue.Queue  # its stderr, read from the start (None at the end): a full pipe would stop it


class WarmWorkers:
    """Validation's worker processes, kept waiting after their verdict (`worker --validate --serve`): the
    first job on a build's interpreter runs in that build's (`take`), so its engine is imported once for
    both (vLLM: about 6 s). Those never taken are told to exit (`close`, or the end of the `with`)."""

    def __init__(self) -> None:
        self._waiting: dict[str, _Waiting] = {}
        self._lock = threading.Lock()

    def start(self, python: str, args: list[str]) -> tuple[str, list[str]]:
        """Start `python -m badc_replay.worker ARGS --serve`; its first stdout line (the validation), and
        its stderr so far when it ended without one."""
        proc = subprocess.Popen([python, *WORKER, *args, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            for line in proc.stderr:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        for line in proc.stdout:  # an engine may print on stdout while it is imported
            if line.startswith(VERDICT):
                with self._lock:
                    self._waiting[python] = _Waiting(proc, lines)
                return line[len(VERDICT):], []
        proc.wait()
        return "", [line for line in iter(lines.get, None)]

    def take(self, cmd: list[str]) -> tuple[subprocess.Popen, Iterable[str]] | None:
        """The waiting worker of `cmd`'s interpreter, given `cmd`'s arguments, with its stderr lines; None
        when none waits (or it has died)."""
        if cmd[1:3] != WORKER:
            return None
        with self._lock:
            w = self._waiting.pop(cmd[0], None)
        if w is None:
            return None
        w.proc.stdout.close()  # it writes there no more (after the verdict, to /dev/null)
        try:
            w.proc.stdin.write(json.dumps(cmd[3:]) + "\n")
            w.proc.stdin.close()
        except OSError:
            w.proc.wait()
            return None
        return w.proc, iter(w.lines.get, None)

    def close(self) -> None:
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
        for w in waiting:  # end of input: the worker exits without running anything
            for stream in (w.proc.stdin, w.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            w.proc.wait()

    def __enter__(self) -> WarmWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_local(job: Job | Chain, cmd: list[str], progress: Progress, log: Callable[[str], None],
               warm: WarmWorkers | None = None) -> int:
    if job.count:  # a shard, or a pilot: they draw, report progress, and can hang
        progress.begin(job.cid, job.arm)
    limit = stall_limit() if job.count else 0.0
    taken = warm.take(cmd) if warm is not None else None
    if taken is None:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines: Iterable[str] = proc.stderr
    else:
        proc, lines = taken
    tail: list[str] = []
    last, stalled = [time.monotonic()], threading.Event()
    if limit:  # an engine that hangs (vLLM after a failed step, say) must not hang the campaign
        threading.Thread(target=_watch, args=(proc, last, limit, stalled), daemon=True).start()
    try:
        for line in lines:
            if line.startswith(("progress ", "resumed ")):
                last[0] = time.monotonic()
                words = line.split()  # progress ARM DONE/TOTAL START (a chain's lines name their shard)
                progress.update(job.cid, job.arm, int(words[3]) if len(words) > 3 else job.start,
                                int(words[2].split("/")[0]), resumed=words[0] == "resumed")
            elif line.startswith("exact ") and len(line.split()) == 3:  # exact ID SECONDS: one config done
                _, cid, seconds = line.split()
                log(f"{cid}: exact channel computed in {seconds} s")
            elif "n_ctx" not in line and line.strip():
                tail = (tail + [line.rstrip()])[-10:]
        return proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if stalled.is_set():
            log(f"{job.cid}: {job.label} made no progress for {limit:.0f} s (BADC_STALL_S): killed as hung; "
                "last lines: " + " | ".join(tail[-3:]))
        elif proc.returncode not in (0, None):
            log(f"{job.cid}: worker exited with {proc.returncode}: " + " | ".join(tail[-3:]))


def _ray_task(cmd: list[str]) -> int:  # runs on a Ray worker; the folder must be shared with it
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def _run_inline(job: Job | Chain, out: Path, seed: int, seal: str) -> int:
    """In this process, with this interpreter's engine (the pytest plugin's way)."""
    from badc_replay import worker

    if job.kind == "laws":
        for j in _parts(job):
            worker.laws(j.config, out, seed=seed, pilot=j.count)
        return 0
    if job.kind == "exact":
        for j in _parts(job):
            worker.exact(j.config, out, soundness=j.soundness, witness=j.witness, tol=j.tol, seed=seed, seal=seal)
        return 0
    for j in _parts(job):
        if isinstance(job, Chain) and job.stop is not None and job.stop.exists():
            break
        worker.shard(j.config, j.arm, j.start, j.count, seed, out, level=j.level, repair=j.repair, seal=seal)
    return 0


def _parts(job: Job | Chain) -> list[Job]:
    return job.jobs if isinstance(job, Chain) else [job]


class Executor:
    """Runs jobs with K local worker processes, as Ray tasks (`executor="ray"`), or in this process
    (`executor="inline"`, with the engine of the running interpreter)."""

    def __init__(self, kind: str, workers: int, progress: Progress, log: Callable[[str], None],
                 warm: WarmWorkers | None = None):
        if kind not in ("local", "ray", "inline"):
            raise CampaignError(f"executor must be local, ray or inline, not {kind!r}")
        self.kind, self.workers, self.progress, self.log, self.warm = kind, max(1, workers), progress, log, warm
        # how many shards run at once, for the time-left estimate; unknown on a Ray cluster
        progress.workers = 1 if kind == "inline" else 0 if os.environ.get("RAY_ADDRESS") else self.workers
        if kind == "ray":
            try:
                import ray
            except ImportError:
                raise CampaignError("the Ray executor needs ray: pip install 'ray[default]' in .venv") from None
            if not ray.is_initialized():
                ray.init(address=os.environ.get("RAY_ADDRESS") or None, num_cpus=None if os.environ.get(
                    "RAY_ADDRESS") else self.workers, include_dashboard=False, log_to_driver=False)
            self._remote = ray.remote(num_cpus=1)(_ray_task)

    def run(self, jobs: list[tuple[Job | Chain, list[str]]], out: Path | None = None, seed: int = 0,
            seal: str = "", skip: Callable[[Job | Chain], bool] = lambda job: False) -> list[int]:
        """Run the jobs (or chains of shards); `skip(job)`, asked as each would start, leaves it out (a
        config decided meanwhile)."""
        if self.kind == "inline":
            codes = []
            for job, _ in jobs:
                codes.append(0 if skip(job) else _run_inline(job, out, seed, seal))
                self._finished(job, codes[-1], out)
            return codes
        if self.kind == "ray":
            import ray

            jobs = [(job, cmd) for job, cmd in jobs if not skip(job)]
            for job, _ in jobs:
                if job.count:
                    self.progress.begin(job.cid, job.arm)
            refs = [self._remote.remote(cmd) for _, cmd in jobs]
            codes = []
            for (job, _), ref in zip(jobs, refs, strict=True):
                codes.append(ray.get(ref))
                self._finished(job, codes[-1], out)
            return codes
        from concurrent.futures import ThreadPoolExecutor

        def one(item: tuple[Job | Chain, list[str]]) -> int:
            job, cmd = item
            if skip(job):
                return 0
            code = _run_local(job, cmd, self.progress, self.log, self.warm)
            self._finished(job, code, out)
            return code

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(one, jobs))

    def _finished(self, job: Job | Chain, code: int, out: Path | None) -> None:
        """Count a finished job's draws; of a chain, the shards it wrote (it may stop early or fail midway)."""
        for j in _parts(job):
            if not j.count:
                continue
            if isinstance(job, Chain) and out is not None:
                if not j.output(out).exists():
                    with self.progress.lock:
                        self.progress.inflight.pop((j.cid, j.arm, j.start), None)
                    continue
            elif code != 0:
                continue
            self.progress.update(j.cid, j.arm, j.start, j.count, final=True)
            if out is not None:
                self.progress.timed(j.output(out))
