"""Loaded by every Python process that badc-trace starts (its folder is put first on PYTHONPATH).

Installs the probes of each supported engine when the engine is first imported (a post-import hook:
nothing is imported early, which matters for vLLM, whose worker crashes if numba is imported before
it), writing one trace per process.
"""

import os

if os.environ.get("BADC_TRACE_OUT"):
    from badc_trace.launcher import activate

    activate()
