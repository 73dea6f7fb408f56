"""Running an ordinary program under badc-trace, for the tests of the user's path."""

import subprocess
import sys


def trace_program(tmp_path, script_text, python, *options, done="script done"):
    """Run `script_text` under `python` through badc-trace (it must print `done`); the path of its trace."""
    script = tmp_path / "user.py"
    script.write_text(script_text)
    out = tmp_path / "user.badc"
    proc = subprocess.run([sys.executable, "-m", "badc_trace.launcher", "--out", str(out), *options, "--",
                           str(python), str(script)], capture_output=True, text=True)
    assert proc.returncode == 0 and done in proc.stdout, proc.stderr[-2000:]
    return out
