"""What level full's score vectors cost under other lossless codecs (issue 50, item 2).

Level full keeps each processor call's incoming and outgoing float32 scores; the trace compresses them
with zstd, chunk by chunk. This measures, on the score vectors of a level-full trace, the bytes per
request each codec would leave: zstd as the trace writes them (level 3, each vector alone), the byte
planes of each vector (every value's first byte, then its second, ...: a "byte-shuffle" filter) before
zstd, each plane compressed on its own, and zstd's strongest level. Without a trace it makes one:
SmolLM2-135M, guidance under prompt lookup, 8 new tokens (tools/bench.py's transformers-smollm2 cell).

    .venvs/transformers-5.24.0/bin/python tools/bench_score_codecs.py [--requests 6] [TRACE]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

import zstandard


def planes(v: bytes) -> list[bytes]:
    return [v[i::4] for i in range(4)]


CODECS: dict[str, Callable[[bytes], int]] = {
    "zstd-3 (as written)": lambda v: len(zstandard.ZstdCompressor(level=3).compress(v)),
    "byte planes, zstd-3": lambda v: len(zstandard.ZstdCompressor(level=3).compress(b"".join(planes(v)))),
    "each plane, zstd-3": lambda v: sum(len(zstandard.ZstdCompressor(level=3).compress(p)) for p in planes(v)),
    "each plane, zstd-19": lambda v: sum(len(zstandard.ZstdCompressor(level=19).compress(p)) for p in planes(v)),
}


def make_trace(path: str, requests: int) -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from bench import ENGINES

    from badc_replay.arms import collect
    from badc_replay.registry import get_engine

    engine = get_engine("transformers")
    cfg = engine.parse_config({"id": "bench", **ENGINES["transformers-smollm2"]["config"]})
    collect(engine, cfg, "on", requests, 1, trace_path=path, level="full")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", help="a level-full trace (default: make one)")
    ap.add_argument("--requests", type=int, default=6, help="requests of the trace made without TRACE")
    args = ap.parse_args(argv)
    from badc_trace.format import read_trace

    with tempfile.TemporaryDirectory() as tmp:
        path = args.trace or os.path.join(tmp, "full.badc")
        if args.trace is None:
            make_trace(path, args.requests)
        vectors: dict[str, list[bytes]] = {}
        requests = 0
        for rec in read_trace(path):
            requests += rec["type"] == "request"
            if rec["type"] == "processor" and rec["proc"] >= 0:
                for key in ("scores_in", "scores_out"):
                    if key in rec:
                        vectors.setdefault(f"{rec['role']} {key}", []).append(rec[key])
        file_bytes = os.path.getsize(path)
    raw = sum(len(v) for vs in vectors.values() for v in vs)
    print(f"{requests} requests, {sum(map(len, vectors.values()))} score vectors, {raw / requests / 1e6:.2f} MB "
          f"raw and the trace file {file_bytes / requests / 1e6:.2f} MB per request")
    print("| codec | " + " | ".join(vectors) + " | all, MB per request | of raw | ms per vector |")
    print("|---" * (len(vectors) + 4) + "|")
    for name, size in CODECS.items():
        t = time.perf_counter()
        per = {k: sum(map(size, vs)) for k, vs in vectors.items()}
        ms = (time.perf_counter() - t) / sum(map(len, vectors.values())) * 1e3
        cells = " | ".join(f"{per[k] / sum(map(len, vectors[k])):.3f}" for k in vectors)
        total = sum(per.values())
        print(f"| {name} | {cells} | {total / requests / 1e6:.2f} | {total / raw:.3f} | {ms:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
