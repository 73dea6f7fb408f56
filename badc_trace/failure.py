"""badc's own failures are not verdicts: an uncaught exception in a command exits 4 with one line, and
its traceback goes to a file (exit 1 is a rejection: a violation, a FAILS, a law that differs)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

EXIT_INTERNAL = 4


def write_traceback(command: str, exc: BaseException) -> str:
    """The exception's traceback in a new file (BADC_CRASH_DIR, else the temporary folder); its path."""
    folder = os.environ.get("BADC_CRASH_DIR") or tempfile.gettempdir()
    os.makedirs(folder, exist_ok=True)
    name = f"badc-failure-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(f"{command}: {' '.join(sys.argv)}\n\n")
        traceback.print_exception(exc, file=f)
    return path


def guarded(command: str, run: Callable[[], int]) -> int:
    """`run()`'s exit status; an exception escaping it (a defect in badc) is said in one line on stderr and
    exits 4, with the traceback written to a file."""
    try:
        return run()
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # anything else that escapes a command is badc's own defect
        try:
            where = f"the traceback is in {write_traceback(command, e)}"
        except OSError as io_error:
            where = f"its traceback could not be written: {io_error}"
        print(f"{command} failed: {type(e).__name__}: {e} (a defect in badc; {where})", file=sys.stderr)
        return EXIT_INTERNAL
