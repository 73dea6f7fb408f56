#!/usr/bin/env python3
"""Fuzz badc's readers with damaged and forged inputs, in process: traces (`badc replay`), counts files
(`badc check`) and campaign files (`load_campaign`). Prints one table per input kind: how many cases
exited 0/1/2/3/4, escaped as an exception (a traceback), hung (over --hang seconds) and the peak memory
growth; and the cases that matter: an exit 0 on a trace mutation that changed what replay reads (or 1
where the unmutated trace held), an exit 4, an exception or a hang. Targets: none of them.

    .venv/bin/python tools/fuzz_inputs.py                  # 2,000 trace, 300 counts, 100 campaign cases
    .venv/bin/python tools/fuzz_inputs.py --traces 200 --counts 30 --campaigns 10 --seed 1

Trace mutations start from the committed findings traces rewritten in the current format (so the
sync records are there to check) and change chunks as storage or an editor would: bytes flipped,
cut at and inside chunk boundaries, spliced, chunks dropped, duplicated, swapped, appended or taken
from another trace; records dropped, duplicated, swapped, appended after the end record, a second
header, NaN and infinity in numeric fields, wrong types in fields, a header naming another engine,
each chunk re-compressed with a valid chunk checksum (the sync records are left as written).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import resource
import struct
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path

import msgpack
import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from badc_check.cli import main as badc  # noqa: E402
from badc_trace.format import DESCRIPTOR_SIZE, TraceWriter, read_trace  # noqa: E402

SOURCES = ["findings/llama_cpp-0.3.36/LCP-2-on.badc", "findings/llama_cpp-0.3.36/LCP-2-repaired.badc",
           "findings/vllm-0.32.0/VLLM-1-on.badc", "findings/vllm-0.32.0/VLLM-1-repaired.badc"]


def chunk(records: list) -> bytes:
    raw = b"".join(msgpack.packb(r, use_bin_type=True) for r in records)
    comp = zstandard.ZstdCompressor(write_content_size=True).compress(raw)
    first = struct.pack("<II4sIIII", 0x184D2A5B, 24, b"BDC1", len(comp), len(raw), len(records), zlib.crc32(raw))
    return first + struct.pack("<I", zlib.crc32(first)) + comp


def split_chunks(data: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(data):
        comp_len = struct.unpack_from("<I", data, at + 12)[0]
        out.append(data[at:at + DESCRIPTOR_SIZE + comp_len])
        at += DESCRIPTOR_SIZE + comp_len
    return out


def records_of(c: bytes) -> list:
    return list(msgpack.Unpacker(io.BytesIO(zstandard.ZstdDecompressor().decompress(c[DESCRIPTOR_SIZE:])),
                                 raw=False))


def normalized(path: str, tmp: Path) -> bytes:
    """A source trace rewritten by the current writer (small chunks, so chunk mutations have room)."""
    reader = read_trace(ROOT / path)
    h = reader.header
    out = tmp / (Path(path).stem + ".badc")
    with TraceWriter(out, engine=h["engine"], build=h["build"], config=h["config"], seal=h["seal"],
                     chunk_records=40) as w:
        for rec in reader:
            w.write(rec)
    return out.read_bytes()


def _poison(rec: dict, rng: random.Random) -> dict | None:
    fields = [k for k in rec if k != "type"]
    if not fields:
        return None
    k = rng.choice(fields)
    v = rec[k]
    bad = [math.nan, math.inf, "x", None, [1.5], {"a": 1}, -1, True, b"\x00"]
    if isinstance(v, list) and v and rng.random() < 0.5:
        v = list(v)
        v[rng.randrange(len(v))] = rng.choice(bad)
        return {**rec, k: v}
    return {**rec, k: rng.choice(bad)}


def trace_mutation(data: bytes, foreign: bytes, rng: random.Random) -> tuple[str, bytes]:
    chunks = split_chunks(data)
    kind = rng.choice(["bit flip", "truncate at boundary", "truncate inside", "splice bytes", "drop chunk",
                       "duplicate chunk", "swap chunks", "append chunk", "foreign chunk", "drop record",
                       "duplicate record", "swap records", "record after end", "second header", "poison field",
                       "relabel engine"])
    if kind == "bit flip":
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return kind, bytes(b)
    if kind == "truncate at boundary":
        return kind, b"".join(chunks[:rng.randrange(1, len(chunks))])
    if kind == "truncate inside":
        return kind, data[:rng.randrange(1, len(data))]
    if kind == "splice bytes":
        at = rng.randrange(len(data))
        return kind, data[:at] + os.urandom(rng.randrange(1, 64)) + data[at:]
    i, j = rng.randrange(len(chunks)), rng.randrange(len(chunks))
    if kind == "drop chunk":
        return kind, b"".join(chunks[:i] + chunks[i + 1:])
    if kind == "duplicate chunk":
        return kind, b"".join(chunks[:i] + [chunks[i]] + chunks[i:])
    if kind == "swap chunks":
        chunks[i], chunks[j] = chunks[j], chunks[i]
        return kind, b"".join(chunks)
    if kind == "append chunk":
        return kind, data + chunks[i]
    if kind == "foreign chunk":
        other = split_chunks(foreign)
        return kind, b"".join(chunks[:i] + [rng.choice(other)] + chunks[i:])
    i = rng.randrange(1, len(chunks)) if kind != "relabel engine" else 0
    recs = records_of(chunks[i])
    body = recs[:-1]  # the chunk's sync or end record stays as written
    if kind == "relabel engine":
        recs[0] = {**recs[0], "engine": rng.choice(["toy", "llama_cpp", "vllm", "transformers"])}
    elif not body:
        recs = [recs[0]] + recs
    elif kind == "drop record":
        del recs[rng.randrange(len(body))]
    elif kind == "duplicate record":
        k = rng.randrange(len(body))
        recs.insert(k, recs[k])
    elif kind == "swap records" and len(body) > 1:
        a, b = rng.sample(range(len(body)), 2)
        recs[a], recs[b] = recs[b], recs[a]
    elif kind == "record after end":
        recs.append(rng.choice(body))
    elif kind == "second header":
        recs.insert(rng.randrange(len(body) + 1), records_of(chunks[0])[0])
    else:
        k = rng.randrange(len(body))
        poisoned = _poison(recs[k], rng)
        if poisoned is None or poisoned == recs[k]:
            return kind, data
        recs[k] = poisoned
    chunks[i] = chunk(recs)
    return kind, b"".join(chunks)


def run_case(argv: list[str], hang: float) -> tuple[str, float]:
    err = io.StringIO()
    start = time.monotonic()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = badc(argv)
        status = str(rc)
    except SystemExit as e:
        status = str(e.code)
    except Exception as e:  # a traceback: what the target forbids
        status = f"exception {type(e).__name__}"
    took = time.monotonic() - start
    return ("hang" if took > hang else status), took


def what_replay_reads(path: Path) -> list | None:
    try:
        r = read_trace(path, allow_torn_tail=True)
        recs = [r.header, *list(r)]
        return recs + [r.torn_tail is None]
    except Exception:
        return None


def fuzz_traces(n: int, rng: random.Random, tmp: Path, hang: float, bad: list[str]) -> Counter:
    sources = [normalized(p, tmp) for p in SOURCES]
    originals, verdicts = [], []
    for i, data in enumerate(sources):
        p = tmp / f"orig{i}.badc"
        p.write_bytes(data)
        originals.append(what_replay_reads(p))
        verdicts.append(run_case(["replay", str(p)], hang)[0])
    table: Counter = Counter()
    for case in range(n):
        s = rng.randrange(len(sources))
        kind, data = trace_mutation(sources[s], sources[(s + 1) % len(sources)], rng)
        path = tmp / "case.badc"
        path.write_bytes(data)
        status, _ = run_case(["replay", str(path)], hang)
        table[status] += 1
        changed = what_replay_reads(path) != originals[s]
        # exit 0 on changed evidence is a pass on lost or forged evidence; exit 1 where the unmutated trace
        # has no violation is a violation made up from damage (a violation read before a torn tail is real)
        forged = changed and (status == "0" or status == "1" and verdicts[s] != "1")
        if forged or status == "4" or status.startswith(("exception", "hang")):
            keep = tmp / f"bad-{case}.badc"
            keep.write_bytes(data)
            bad.append(f"trace case {case} ({kind}, from {SOURCES[s]}): {status}; kept as {keep}")
    return table


def counts_doc(rng: random.Random) -> dict:
    p = {"1 2|length": 0.5, "1|eos": 0.3, "|eos": 0.2}
    return {"alpha": 0.05, "threshold": 0.01, "configs": [
        {"id": "A", "on": {"1 2|length": 480, "1|eos": 320, "|eos": 200}, "off": {"1 2|length": 500, "1|eos": 300,
                                                                                    "|eos": 200},
         "reference": p, "exercise": {"proposed": 50, "accepted": 20}, "predicates": {"x": ["|eos"]}}]}


def counts_mutation(rng: random.Random) -> str:
    doc = counts_doc(rng)
    c = doc["configs"][0]
    kind = rng.randrange(9)
    junk = [math.nan, "x", None, [], {}, -1, 10**300, True, 1.5, "²|eos", "03|eos", "٣|eos", ["1|eos"]]
    if kind == 0:
        c["on"][rng.choice(["²|eos", "03|eos", "٣|eos", "３|eos", "1  2|eos", "1|", "|", "1 2|a b"])] = 1
    elif kind == 1:
        c[rng.choice(list(c))] = rng.choice(junk)
    elif kind == 2:
        arm = rng.choice(["on", "off"])
        c[arm][rng.choice(list(c[arm]))] = rng.choice(junk)
    elif kind == 3:
        doc[rng.choice(["alpha", "threshold", "m", "configs"])] = rng.choice(junk)
    elif kind == 4:
        return "[" * rng.randrange(500, 3000) + "]" * 10
    elif kind == 5:
        return json.dumps(doc).replace('"alpha": 0.05', '"alpha": 0.05, "alpha": 0.01')
    elif kind == 6:
        text = bytearray(json.dumps(doc).encode())
        text[rng.randrange(len(text))] = rng.randrange(256)
        return text.decode("latin-1")
    elif kind == 7:
        c["support"] = rng.choice(junk)
    else:
        c[rng.choice(["refernce", "on_arm", "exercize"])] = {}
    return json.dumps(doc, allow_nan=True)


def fuzz_counts(n: int, rng: random.Random, tmp: Path, hang: float, bad: list[str]) -> Counter:
    table: Counter = Counter()
    for case in range(n):
        path = tmp / "counts.json"
        path.write_text(counts_mutation(rng), encoding="utf-8", errors="surrogateescape")
        status, _ = run_case(["check", str(path)], hang)
        table[status] += 1
        if status == "4" or status.startswith(("exception", "hang")):
            bad.append(f"counts case {case}: {status}: {path.read_text()[:200]!r}")
    return table


CAMPAIGN = ('[campaign]\nname = "f"\ndraws = 10\n\n[[config]]\nid = "T"\nrole = "probe"\nengine = "toy"\n'
            'build = "0.1.0"\nmax_new_tokens = 3\n')
VALUES = ['"../x"', '"a b"', "-4", '"1.0"', "0", "1e400", '"tiny:abc"', "[1, 2]", "{ a = 1 }", '"x"', "true", "nan"]


def fuzz_campaigns(n: int, rng: random.Random, tmp: Path, hang: float, bad: list[str]) -> Counter:
    from badc_check.campaign import CampaignError, load_campaign

    table: Counter = Counter()
    for case in range(n):
        text = CAMPAIGN
        kind = rng.randrange(4)
        if kind == 0:
            key = rng.choice(["id", "build", "model", "max_new_tokens", "role", "prompt", "engine", "draws"])
            text += f"{key}_{rng.randrange(3)} = 1\n" if rng.random() < 0.3 else f"{key} = {rng.choice(VALUES)}\n"
        elif kind == 1:
            b = bytearray(text.encode())
            b[rng.randrange(len(b))] = rng.randrange(256)
            text = b.decode("latin-1")
        elif kind == 2:
            text = text.replace('id = "T"', f"id = {rng.choice(VALUES)}")
        else:
            text += f'[[config]]\nid = "U"\nengine = "llama_cpp"\nbuild = "0.3.36"\n' \
                    f'{rng.choice(["sampling", "drafter"])} = {{ {rng.choice(["temperature", "num_pred_tokens"])} ' \
                    f'= {rng.choice(VALUES)} }}\n'
        path = tmp / "c.toml"
        path.write_bytes(text.encode("latin-1", errors="replace"))
        start = time.monotonic()
        try:
            load_campaign(path)
            status = "accepted"
        except CampaignError:
            status = "2"
        except Exception as e:
            status = f"exception {type(e).__name__}"
        if time.monotonic() - start > hang:
            status = "hang"
        table[status] += 1
        if status.startswith(("exception", "hang")):
            bad.append(f"campaign case {case}: {status}: {text[-160:]!r}")
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=2000)
    ap.add_argument("--counts", type=int, default=300)
    ap.add_argument("--campaigns", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang", type=float, default=30.0, help="seconds after which a case counts as hung")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bad: list[str] = []
    os.environ.setdefault("BADC_CRASH_DIR", tempfile.mkdtemp(prefix="badc-fuzz-crash-"))
    with tempfile.TemporaryDirectory(prefix="badc-fuzz-") as d:
        tmp = Path(d)
        keep = Path(tempfile.mkdtemp(prefix="badc-fuzz-kept-"))
        for name, fn, n in (("traces", fuzz_traces, args.traces), ("counts", fuzz_counts, args.counts),
                            ("campaigns", fuzz_campaigns, args.campaigns)):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            start = time.monotonic()
            table = fn(n, rng, keep if name == "traces" else tmp, args.hang, bad)
            grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
            cells = " | ".join(f"{k}: {v}" for k, v in sorted(table.items()))
            print(f"| {name} | {n} | {cells} | peak RSS +{grew:.0f} MiB | {time.monotonic() - start:.0f} s |",
                  flush=True)
    for line in bad:
        print(f"BAD {line}")
    print(f"{len(bad)} case(s) against the targets")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
