"""`badc-trace [--out FILE] [--level counts|calls|full] -- python script.py ...`

Runs any program with every supported engine instrumented from import time on: the program is
unmodified; a sitecustomize on PYTHONPATH registers post-import hooks that install the probes when
an engine module is first imported. Each engine that records anything writes its own trace, in each
process: the first one FILE, any other FILE with its process id before the suffix. Replay it with
`badc replay FILE`.
"""

from __future__ import annotations

import argparse
import atexit
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_SITE = Path(__file__).with_name("autoinstrument")


def _claim(path: str) -> str:
    """FILE for the first process that asks, FILE with the pid inserted for the others."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return path
    except FileExistsError:
        stem, dot, suffix = path.rpartition(".")
        return f"{stem}.{os.getpid()}.{suffix}" if dot else f"{path}.{os.getpid()}"


def process_traces(path: str) -> list[Path]:
    """The traces one badc-trace run wrote to FILE: FILE itself and FILE with a process id (`_claim`)."""
    p = Path(path)
    stem, suffix = (p.stem, p.suffix) if p.suffix else (p.name, "")
    others = [q for q in p.parent.glob(f"{stem}.*{suffix}")
              if q.name[len(stem) + 1: len(q.name) - len(suffix)].isdigit()]
    return ([p] if p.exists() else []) + sorted(others)


class _LazyWriter:
    """Opens its trace at the first record: an engine that is only imported (vLLM imports
    transformers) leaves no trace, and FILE goes to the first engine that records anything. What it
    holds is flushed every FLUSH_S seconds by a daemon thread (a server sits idle with the last
    requests' records in the buffer), or after every record when `write_through` (the processes a
    program starts, which their parents may SIGKILL)."""

    FLUSH_S = 1.0

    def __init__(self, make: Any, write_through: bool = False):
        self.make, self.writer, self.write_through = make, None, write_through
        self.lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """In a forked child: the parent's open trace is the parent's (writing to it would interleave two
        processes' chunks, closing it would write the parent's buffer twice); the child claims its own,
        written through, since a parent may kill it."""
        self.writer, self.lock, self.write_through = None, threading.Lock(), True

    def write(self, record: dict[str, Any]) -> None:
        with self.lock:
            if self.writer is None:
                if record.get("type") == "counts" and not record.get("requests"):  # an engine that saw no request
                    return
                self.writer = self.make(self.write_through)
                threading.Thread(target=self._flush_often, name="badc-trace-flush", daemon=True).start()
            self.writer.write(record)
            if self.write_through:
                self.writer.flush()

    def _flush_often(self) -> None:
        while True:
            time.sleep(self.FLUSH_S)
            with self.lock:
                if self.writer is None or self.writer.closed:
                    return
                self.writer.flush()

    def idle(self, timeout: float) -> bool:
        """Whether no write is in progress (waiting up to `timeout` s for one to end). From a signal
        handler the interrupted write may be this thread's own: the trace is then left as it is (torn,
        and said so by replay), never deadlocked."""
        if not self.lock.acquire(timeout=timeout):
            return False
        self.lock.release()
        return True

    def close(self) -> None:
        with self.lock:
            if self.writer is not None:
                self.writer.close()


_closers: list[Any] = []  # one per engine instrumented in this process: uninstrument, then close its trace


def _close_traces() -> None:
    while _closers:
        _closers.pop()()


def _exit_closing(real_exit: Any) -> Any:
    """os._exit that closes this process's traces first: multiprocessing's forked children and servers'
    workers end with os._exit, which skips atexit and would leave the trace without its end record."""
    def _exit(code: int) -> None:
        try:
            _close_traces()
        finally:
            real_exit(code)
    _exit.badc_real = real_exit
    return _exit


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM's default (die at once) after closing the traces; a program that sets its own handler
    replaces this one and ends through atexit."""
    import signal

    _close_traces()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _close_on_exit() -> None:
    """Close the traces however the process ends (once, when its first engine is instrumented: a
    process that never imports one keeps its exit and SIGTERM as they were)."""
    import signal

    if hasattr(os._exit, "badc_real"):
        return
    atexit.register(_close_traces)
    os._exit = _exit_closing(os._exit)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def activate() -> None:
    """Register the post-import hooks (called from the sitecustomize in each traced process)."""
    import wrapt

    from badc_trace.format import TraceWriter
    from badc_trace.instrument import TraceSink
    from badc_trace.registry import probe_class, probe_paths

    out, level = os.environ["BADC_TRACE_OUT"], os.environ.get("BADC_TRACE_LEVEL", "calls")
    # The program badc-trace started ends by itself or by a signal it can handle; the processes it starts
    # are often killed (SIGKILL) by their parent at shutdown: theirs write every record through, so a
    # trace without its end record still holds every record the process wrote (replay says which).
    write_through = str(os.getppid()) != os.environ.get("BADC_TRACE_LAUNCHER")

    def hook_for(engine: str, cls: type):
        def install(_module: object) -> None:
            instrumentor = cls()
            if instrumentor.is_instrumented:
                return
            writer = _LazyWriter(lambda through: TraceWriter(
                _claim(out), engine=engine, build=instrumentor.installed_version(), seal="",
                config={"argv": sys.argv, "pid": os.getpid(), "cwd": os.getcwd(), "python": sys.executable,
                        "level": level, "write_through": through}), write_through)
            sink = TraceSink(writer, level)
            instrumentor.instrument(sink)

            def close() -> None:
                instrumentor.uninstrument()
                if writer.idle(timeout=2):
                    sink.close()

            _closers.append(close)
            _close_on_exit()

        return install

    for engine in probe_paths():  # probe modules import no engine, so loading the classes here is cheap
        cls = probe_class(engine)
        if cls.hook:
            wrapt.register_post_import_hook(hook_for(engine, cls), cls.hook)


def main(argv: list[str] | None = None) -> int:
    from badc_trace.failure import guarded

    return guarded("badc-trace", lambda: _main(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(
        prog="badc-trace", usage="badc-trace [--out FILE] [--level counts|calls|full] -- COMMAND ...",
        description="Run an unmodified program with every supported engine (transformers, llama-cpp-python, "
                    "vLLM) probed from import time on, and write what each drafter call, processor callback, cache "
                    "crop and stop check saw to a trace. Check it with `badc replay FILE`.",
        epilog="Each process that records writes its own trace: the first FILE, the others FILE with their process "
               "id before the suffix. The exit status is the program's.")
    ap.add_argument("--out", default="badc-trace.badc", help="trace file (default badc-trace.badc)")
    ap.add_argument("--level", default="calls", choices=("counts", "calls", "full"),
                    help="counts: exercise counters only; calls (default): every call's ids and state digests; "
                         "full: also the scores each processor saw and returned (transformers' D2 replay needs it)")
    if "--" not in argv and not {"-h", "--help"} & set(argv):
        ap.error("give the program to run after --, e.g. badc-trace -- python script.py")
    args = ap.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        ap.error("give the program to run after --, e.g. badc-trace -- python script.py")
    out = os.path.abspath(args.out)
    for old in process_traces(out):  # a new run, new traces
        old.unlink()
    env = dict(os.environ, BADC_TRACE_OUT=out, BADC_TRACE_LEVEL=args.level, BADC_TRACE_LAUNCHER=str(os.getpid()),
               PYTHONPATH=os.pathsep.join(p for p in (str(_SITE), os.environ.get("PYTHONPATH", "")) if p))
    try:
        proc = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        print(f"badc-trace: command not found: {command[0]}", file=sys.stderr)
        return 127
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:  # Ctrl-C reached the program too: it decides how to stop, and its traces close
            continue
    traces = process_traces(out)
    print(f"badc-trace: exit {code}; traces: {', '.join(str(t) for t in traces) or 'none (no engine imported)'}",
          file=sys.stderr)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says it


if __name__ == "__main__":
    sys.exit(main())
