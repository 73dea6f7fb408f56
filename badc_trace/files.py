"""Writing files so that a crash or a kill never leaves half of one: the new content goes to a temporary
name in the same folder and is renamed over the old (`os.replace`, atomic on POSIX). A reader sees the
old file or the whole new one. One helper for every result badc writes: seals, reports, checkpoints,
worker results, the tiny models' caches."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside `path` to write a file or a folder to, renamed over `path` when the block ends
    without an exception (removed otherwise). A folder that already exists is kept: another process wrote
    the same one first (the tiny models' caches)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        try:
            os.replace(tmp, path)
        except OSError:
            if not (tmp.is_dir() and path.is_dir()):
                raise
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """`data` to `path`, whole or not at all (the folder is made)."""
    with replacing(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)


def write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = None) -> None:
    """`obj` as JSON to `path`, whole or not at all."""
    write_atomic(path, json.dumps(obj, indent=indent))
