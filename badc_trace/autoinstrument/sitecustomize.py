"""Loaded by every Python process that badc-trace starts (its folder is put first on PYTHONPATH).

Installs the probes of each supported engine when the engine is first imported (a post-import hook:
nothing is imported early, which matters for vLLM: importing its model runner before `LLM()` breaks
its start-up), writing one trace per engine and process.
"""

import os

if os.environ.get("BADC_TRACE_OUT"):
    from badc_trace.launcher import activate

    activate()
