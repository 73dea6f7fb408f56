"""badc live side: trace format, probes and tiny models. Imported inside engine processes, so it
depends on numpy, wrapt, msgpack and zstandard only, and imports no engine at import time."""

from badc_trace.format import (
    FORMAT_VERSION,
    TornTail,
    TornTailError,
    TraceFormatError,
    TraceReader,
    TraceWriter,
    read_trace,
)

__all__ = [
    "FORMAT_VERSION",
    "TornTail",
    "TornTailError",
    "TraceFormatError",
    "TraceReader",
    "TraceWriter",
    "read_trace",
]
