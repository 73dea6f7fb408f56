"""Trace format v1: round trip, crash safety and hostile input."""

from __future__ import annotations

import functools
import io
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zlib

import msgpack
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badc_trace.format import (
    _DESC,
    DESCRIPTOR_SIZE,
    DESCRIPTOR_TAG,
    SKIPPABLE_MAGIC,
    TornTailError,
    TraceFormatError,
    TraceWriter,
    read_trace,
)


def _write(path, records, **kw):
    with TraceWriter(path, engine="llama_cpp", build="0.3.36", config={"id": "T"}, seal="abc", **kw) as w:
        for r in records:
            w.write(r)


def _chunk(raw: bytes, *, comp: bytes | None = None, raw_len: int | None = None, n: int = 1,
           comp_len: int | None = None) -> bytes:
    """A chunk with a valid descriptor checksum around arbitrary (possibly hostile) content."""
    comp = zstandard.ZstdCompressor().compress(raw) if comp is None else comp
    desc = _DESC.pack(SKIPPABLE_MAGIC, DESCRIPTOR_SIZE - 8, DESCRIPTOR_TAG,
                      len(comp) if comp_len is None else comp_len,
                      len(raw) if raw_len is None else raw_len, n, zlib.crc32(raw))
    return desc + struct.pack("<I", zlib.crc32(desc)) + comp


HEADER = msgpack.packb({"type": "header", "format": "badc-trace", "version": [1, 0], "engine": "x",
                        "build": "1", "config": {}, "seal": ""})
END = msgpack.packb({"type": "end", "records": 1})


def test_round_trip_million_records(tmp_path):
    path = tmp_path / "t.badc"
    n = 1_000_000
    _write(path, ({"type": "call", "i": i, "ids": [i % 7, i % 5], "p": i * 0.5} for i in range(n)))
    reader = read_trace(path)
    assert reader.header["engine"] == "llama_cpp" and reader.header["config"] == {"id": "T"}
    count = 0
    for i, rec in enumerate(reader):
        assert rec == {"type": "call", "i": i, "ids": [i % 7, i % 5], "p": i * 0.5}
        count += 1
    assert count == n and reader.complete and reader.torn_tail is None


def test_file_is_a_plain_zstd_stream(tmp_path):
    path = tmp_path / "t.badc"
    _write(path, [{"type": "call", "i": 1}])
    # A skippable frame is skipped by any zstd decoder; only the msgpack records come out.
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes()),
                                                    read_across_frames=True) as r:
        recs = list(msgpack.Unpacker(io.BytesIO(r.read()), raw=False))
    assert [r["type"] for r in recs] == ["header", "sync", "call", "end"]  # sync: the header chunk's last record


def test_reader_streams_in_constant_memory(tmp_path):
    path = tmp_path / "t.badc"
    _write(path, ({"type": "call", "i": i, "pad": "x" * 64} for i in range(300_000)))
    tracemalloc.start()
    n = sum(1 for _ in read_trace(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 300_000
    assert path.stat().st_size > 0 and peak < 8 * 1024 * 1024, peak  # the file's raw content is ~30 MB


WRITER = textwrap.dedent("""
    import sys
    from badc_trace.format import TraceWriter
    w = TraceWriter(sys.argv[1], engine="e", build="b", chunk_bytes=4096)
    i = 0
    while True:
        w.write({"type": "call", "i": i, "pad": "y" * (i % 97)})
        i += 1
        if i == 5000:
            print("ready", flush=True)
""")


def test_sigkill_mid_write_keeps_every_complete_chunk(tmp_path):
    path = tmp_path / "killed.badc"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader = read_trace(path, allow_torn_tail=True)
    seq = [r["i"] for r in reader]
    assert len(seq) >= 5000 and seq == list(range(len(seq)))
    assert reader.torn_tail is not None and not reader.complete
    # Strict reading yields the same records, then names the torn tail.
    got = []
    with pytest.raises(TornTailError) as err:
        for r in read_trace(path):
            got.append(r["i"])
    assert got == seq and err.value.offset == reader.torn_tail.offset
    # Cutting the file inside its last chunk is reported at that chunk's offset.
    data = path.read_bytes()
    cut = tmp_path / "cut.badc"
    cut.write_bytes(data[: reader.torn_tail.offset - 3] if reader.torn_tail.offset > 100 else data[:-3])
    r2 = read_trace(cut, allow_torn_tail=True)
    seq2 = [r["i"] for r in r2]
    assert seq2 == seq[: len(seq2)] and len(seq2) < len(seq)
    assert "inside a chunk" in r2.torn_tail.reason and r2.torn_tail.offset < reader.torn_tail.offset


def _consume(path):
    for _ in read_trace(path):
        pass


@pytest.mark.parametrize(
    "name, blob, fragment",
    [
        ("empty", b"", "empty file"),
        ("not a trace", b"hello world, this is text" * 3, "bad magic"),
        ("huge compressed length", _chunk(HEADER, comp_len=2**31), "over the limit"),
        ("huge raw length", _chunk(HEADER, raw_len=2**31), "over the limit"),
        ("bomb", _chunk(b"\0" * 100, comp=zstandard.ZstdCompressor().compress(b"\0" * 50_000_000)),
         "declares 50000000"),
        ("bomb without size", _chunk(b"\0" * 100, comp=zstandard.ZstdCompressor(write_content_size=False)
                                     .compress(b"\0" * 50_000_000)), "declares"),
        ("deep nesting", _chunk(HEADER) + _chunk(b"\x91" * 100_000 + b"\xc0"), "malformed msgpack"),
        ("nesting over limit", _chunk(HEADER) + _chunk(msgpack.packb(
            {"type": "x", "v": functools.reduce(lambda a, _: [a], range(40), 0)})),
         "nested deeper"),
        ("record not a map", _chunk(HEADER) + _chunk(msgpack.packb([1, 2])), "expected a map"),
        ("no type", _chunk(HEADER) + _chunk(msgpack.packb({"a": 1})), "'type'"),
        ("non-string key", _chunk(msgpack.packb({1: 2})), "malformed msgpack"),
        ("ext type", _chunk(msgpack.packb({"type": msgpack.ExtType(5, b"x" * 10)})), "malformed"),
        ("wrong header", _chunk(msgpack.packb({"type": "call"})), "not a badc-trace header"),
        ("header field type", _chunk(msgpack.packb({"type": "header", "format": "badc-trace",
                                                    "version": [1, 0], "engine": 3, "build": "b",
                                                    "config": {}, "seal": ""})), "'engine'"),
        ("future major", _chunk(msgpack.packb({"type": "header", "format": "badc-trace",
                                               "version": [2, 0]})), "version 2.0"),
        ("record count lie", _chunk(HEADER + END, n=1), "more than its declared"),
        ("record count short", _chunk(HEADER, n=2), "declared 2"),
    ],
)
def test_hostile_inputs_fail_clearly(tmp_path, name, blob, fragment):
    path = tmp_path / "h.badc"
    path.write_bytes(blob)
    with pytest.raises(TraceFormatError) as err:
        _consume(path)
    assert fragment in str(err.value) and "byte " in str(err.value), str(err.value)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("leaf", [0, [], {}, [1, {"a": 2}]])
def test_nesting_is_read_up_to_the_limit_and_refused_one_level_past_it(tmp_path, leaf):
    """The record is level 1 and its list "v" level 2, so 29 wrapping lists put a scalar leaf at level 32
    (read) and 30 at 33 (refused), whatever the leaf is and wherever in a wide record the deep value sits."""
    def record(n):
        return {"type": "x", "ids": list(range(50)), "v": [1, "a", functools.reduce(lambda a, _: [a], range(n), leaf)]}

    deepest = 29 if leaf in (0, [], {}) else 27  # [1, {"a": 2}] adds two levels of its own
    for n, ok in ((deepest - 1, True), (deepest, True), (deepest + 1, False)):
        path = tmp_path / f"d{n}.badc"
        path.write_bytes(_chunk(HEADER) + _chunk(msgpack.packb(record(n))) +
                         _chunk(msgpack.packb({"type": "end", "records": 2})))
        if ok:
            _consume(path)
        else:
            with pytest.raises(TraceFormatError, match="nested deeper than 32"):
                _consume(path)


@pytest.mark.parametrize("at", [0, 500, 999])
def test_a_chunk_of_many_records_is_checked_whole(tmp_path, at):
    """A chunk's records are checked together (in C); one record past the limit, a non-map or a record
    without a type, anywhere among a thousand ordinary ones (flat, token ids, a map of settings), is
    refused with the message of a record-by-record reading."""
    ordinary = [{"type": "sample", "idx": i} if i % 3 == 0 else {"type": "stop", "ids": list(range(i % 20))}
                if i % 3 == 1 else {"type": "request", "params": {"k": [1, 2], "s": {"a": None}}} for i in range(1000)]
    deep = functools.reduce(lambda a, _: [a], range(31), 0)
    for bad, fragment in (({"type": "x", "v": deep}, "nested deeper than 32"),
                          ({"type": "x", "p": {"v": deep[0]}}, "nested deeper than 32"),
                          ([1], "is a list, expected a map"), ({"ids": [1]}, "'type'")):
        records = ordinary[:at] + [bad] + ordinary[at + 1:]
        path = tmp_path / "c.badc"
        path.write_bytes(_chunk(HEADER) + _chunk(b"".join(map(msgpack.packb, records)), n=1000))
        with pytest.raises(TraceFormatError, match=fragment):
            _consume(path)
    path.write_bytes(_chunk(HEADER) + _chunk(b"".join(map(msgpack.packb, ordinary)), n=1000)
                     + _chunk(msgpack.packb({"type": "end", "records": 1001})))
    _consume(path)


def test_hostile_error_names_the_bad_chunk_offset(tmp_path):
    good = _chunk(HEADER)
    path = tmp_path / "h.badc"
    path.write_bytes(good + _chunk(msgpack.packb([1])))
    with pytest.raises(TraceFormatError) as err:
        _consume(path)
    assert err.value.offset == len(good) + DESCRIPTOR_SIZE


@pytest.fixture(scope="module")
def valid_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "base.badc"
    _write(path, ({"type": "call", "i": i, "ids": list(range(i % 9))} for i in range(400)),
           chunk_bytes=1024)
    return path.read_bytes()


@settings(max_examples=2000, deadline=2000, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_and_hostile_inputs_only_raise_trace_format_error(valid_trace, tmp_path_factory, data):
    kind = data.draw(st.sampled_from(["truncate", "flip", "splice", "hostile", "garbage"]))
    blob = bytearray(valid_trace)
    if kind == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif kind == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "splice":
        i = data.draw(st.integers(0, len(blob)))
        blob[i:i] = data.draw(st.binary(max_size=64))
    elif kind == "hostile":
        body = data.draw(st.one_of(
            st.binary(max_size=200),
            st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=8),
                         lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c,
                                                                            max_size=4),
                         max_leaves=30).map(lambda v: msgpack.packb(v)),
        ))
        blob = bytearray(_chunk(HEADER) + _chunk(
            body, raw_len=data.draw(st.sampled_from([len(body), 0, 2**24, 2**32 - 1])),
            n=data.draw(st.integers(0, 2**32 - 1)),
            comp_len=data.draw(st.sampled_from([None, 0, 2**32 - 1]))))
    else:
        blob = bytearray(data.draw(st.binary(max_size=300)))
    path = tmp_path_factory.mktemp("m") / "m.badc"
    path.write_bytes(bytes(blob))
    tracemalloc.start()
    try:
        _consume(path)
    except TraceFormatError as e:
        assert e.offset >= 0 and e.offset <= len(blob)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024


def test_writer_rejects_use_after_close(tmp_path):
    w = TraceWriter(tmp_path / "c.badc", engine="e", build="b")
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write({"type": "call"})
    assert os.path.getsize(tmp_path / "c.badc") > 0


def test_sink_writes_engine_values_as_plain_msgpack(tmp_path):
    """Probes hand the sink what engines return: numpy scalars and arrays, tuples, int keys."""
    import numpy as np

    from badc_trace.instrument import TraceSink

    path = tmp_path / "s.badc"
    sink = TraceSink(TraceWriter(path, engine="x", build="1", config={}, seal=""), level="full")
    sink.emit({"type": "call", "ids": [1, 2, 3], "rows": ((4, 5), [np.int64(6), 7]), "p": np.float32(0.5),
               "arr": np.arange(3), "flag": np.bool_(True), "keys": {7: "a"}, "raw": b"\x00", "none": None})
    sink.emit({"type": "leaves", 5: 1, "n": np.int64(2)})  # an int key beside leaves, a numpy leaf alone
    sink.emit({"type": "plain", "ids": (1, 2), "n": 3})  # plain already: written as it is
    sink.close()
    recs = {r["type"]: r for r in read_trace(path)}
    assert recs["call"] == {"type": "call", "ids": [1, 2, 3], "rows": [[4, 5], [6, 7]], "p": 0.5, "arr": [0, 1, 2],
                            "flag": True, "keys": {"7": "a"}, "raw": b"\x00", "none": None}
    assert recs["leaves"] == {"type": "leaves", "5": 1, "n": 2} and recs["plain"] == {"type": "plain", "ids": [1, 2],
                                                                                      "n": 3}


def test_held_records_are_written_in_order_before_the_next_record_and_at_close(tmp_path):
    """emit_later holds a probe's per-token records (written with the next emit, a flush, at close, or
    once HELD are held): the trace reads as if each had been written at once."""
    from badc_trace.instrument import TraceSink

    path = tmp_path / "h.badc"
    # no timed flush in the test: each adds a sync record to the count
    sink = TraceSink(TraceWriter(path, engine="x", build="1", config={}, seal="", flush_seconds=1e9), level="calls")
    sink.emit({"type": "request", "n": 0})
    for i in range(1, 4):
        sink.emit_later({"type": "step", "n": i})
    assert sink.writer.records_written == 3  # the header, its chunk's sync and the request: the steps are held
    sink.emit({"type": "return", "n": 4})  # writes the held steps first
    assert sink.writer.records_written == 7
    for i in range(TraceSink.HELD + 2):
        sink.emit_later({"type": "step", "n": 5 + i})
    assert sink.writer.records_written == 7 + TraceSink.HELD  # never more than HELD held
    sink.flush()
    assert sink.writer.records_written == 9 + TraceSink.HELD
    sink.emit_later({"type": "step", "n": 7 + TraceSink.HELD})
    sink.close()  # writes what is held, then the counts
    recs = [r for r in read_trace(path) if r["type"] != "counts"]
    assert [r["n"] for r in recs] == list(range(8 + TraceSink.HELD))
    assert [r["type"] for r in recs[:5]] == ["request", "step", "step", "step", "return"]
    idle = TraceSink(None, "counts")
    idle.emit_later({"type": "step"})
    idle.flush()
    assert not idle._held  # level counts holds nothing


def test_close_from_a_signal_handler_mid_record_leaves_the_trace_incomplete_not_deadlocked(tmp_path):
    """badc-trace closes traces on SIGTERM, from a handler that may interrupt this very thread inside the
    sink's lock (the lock is not reentrant): close gives up after its timeout instead of waiting forever."""
    import signal
    import time

    from badc_trace.instrument import TraceSink

    path = tmp_path / "s.badc"
    sink = TraceSink(TraceWriter(path, engine="x", build="1", config={}, seal=""), level="calls")
    sink.emit_later({"type": "step"})
    sink.lock.acquire()  # where the handler finds it, interrupting emit_later

    def stuck(signum, frame):
        raise TimeoutError("close waited for a lock its own thread holds")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.setitimer(signal.ITIMER_REAL, 20)  # a close that waited forever fails here instead of hanging
    try:
        t = time.monotonic()
        sink.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - t < 10 and not sink.writer.closed
    with pytest.raises(TornTailError, match="no end record"):  # said to be incomplete by whoever reads it
        list(read_trace(path))
    sink.lock.release()
    sink.close()  # once the record is done, close writes it and the end
    assert [r["type"] for r in read_trace(path)] == ["step", "counts"]


def test_writer_resumes_at_a_position_and_cuts_what_followed(tmp_path):
    """A resumed trace reads as if one writer had written it: the records after the position (work a
    killed process lost) are gone, the header is not repeated, and the end record counts every record."""
    path = tmp_path / "r.badc"
    w = TraceWriter(path, engine="x", build="1", config={"id": "T"}, seal="s")
    for i in range(5):
        w.write({"type": "call", "i": i})
    pos = w.position()
    for i in range(5, 9):  # lost: written after the position, then the process dies mid-chunk
        w.write({"type": "call", "i": i})
    w.flush()
    w._file.write(b"\x5b\x2a\x4d\x18torn")
    w._file.close()
    with pytest.raises(TornTailError):
        list(read_trace(path))

    with TraceWriter(path, engine="x", build="1", resume_at=pos) as r:
        for i in range(5, 7):
            r.write({"type": "call", "i": i, "resumed": True})
    reader = read_trace(path)
    recs = list(reader)
    assert reader.header["config"] == {"id": "T"} and reader.complete and reader.torn_tail is None
    assert [(r["i"], "resumed" in r) for r in recs] == [(i, i >= 5) for i in range(7)]
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes()), read_across_frames=True) as z:
        raw = list(msgpack.Unpacker(io.BytesIO(z.read()), raw=False))
    assert [r["type"] for r in raw].count("header") == 1
    assert raw[-1]["type"] == "end" and raw[-1]["records"] == len(raw) - 1  # every record before it

    with pytest.raises(TraceFormatError, match="cannot resume"):
        TraceWriter(path, engine="x", build="1", resume_at=(10**9, 1))


# -- the documented layout alone (docs/trace-format.md, "Byte layout"), not the reference writer's constants --

def _doc_chunk(records: list[dict]) -> bytes:
    raw = b"".join(msgpack.packb(r, use_bin_type=True) for r in records)
    comp = zstandard.ZstdCompressor(write_content_size=True).compress(raw)
    first = struct.pack("<II4sIIII", 0x184D2A5B, 24, b"BDC1", len(comp), len(raw), len(records), zlib.crc32(raw))
    return first + struct.pack("<I", zlib.crc32(first)) + comp


def _doc_file(chunks: list[list[dict]], *, synced: bool = True) -> bytes:
    """A file from the documented layout: each chunk's records, then (1.1) its sync record, the last its end."""
    out, count, crc = b"", 0, 0
    for i, records in enumerate(chunks):
        body = b"".join(msgpack.packb(r, use_bin_type=True) for r in records)
        count, crc = count + len(records), zlib.crc32(body, crc)
        last = i == len(chunks) - 1
        kind = "end" if last else "sync"
        tail = {"type": kind, "records": count, "crc": crc} if synced else \
            ({"type": "end", "records": count} if last else None)
        if tail is not None:
            records = [*records, tail]
            packed = msgpack.packb(tail, use_bin_type=True)
            count, crc = count + 1, zlib.crc32(packed, crc)
        out += _doc_chunk(records)
    return out


def _doc_read(data: bytes) -> list[list[dict]]:
    """Every chunk's records, read by the documented layout."""
    chunks, at = [], 0
    while at < len(data):
        magic, size, tag, comp_len, raw_len, n, raw_crc, desc_crc = struct.unpack_from("<II4sIIIII", data, at)
        assert (magic, size, tag) == (0x184D2A5B, 24, b"BDC1") and zlib.crc32(data[at:at + 28]) == desc_crc
        raw = zstandard.ZstdDecompressor().decompress(data[at + 32:at + 32 + comp_len])
        assert len(raw) == raw_len and zlib.crc32(raw) == raw_crc
        chunks.append(list(msgpack.Unpacker(io.BytesIO(raw), raw=False)))
        assert len(chunks[-1]) == n
        at += 32 + comp_len
    return chunks


V11 = {"type": "header", "format": "badc-trace", "version": [1, 1], "engine": "x", "build": "1", "config": {},
       "seal": ""}


def test_a_file_written_from_the_documented_layout_reads_back(tmp_path):
    path = tmp_path / "doc.badc"
    path.write_bytes(_doc_file([[V11], [{"type": "call", "i": i} for i in range(5)], [{"type": "call", "i": 5}]]))
    reader = read_trace(path)
    assert [r["i"] for r in reader] == list(range(6)) and reader.complete
    # and the reference writer's file reads by the documented layout, sync and end records as documented
    _write(tmp_path / "ref.badc", [{"type": "call", "i": i} for i in range(3)])
    chunks = _doc_read((tmp_path / "ref.badc").read_bytes())
    flat = [r for c in chunks for r in c]
    assert [r["type"] for r in flat] == ["header", "sync", "call", "call", "call", "end"]
    assert all(c[-1]["type"] in ("sync", "end") for c in chunks)
    assert flat[-1]["records"] == len(flat) - 1 and flat[1]["records"] == 1
    assert flat[-1]["crc"] == zlib.crc32(b"".join(msgpack.packb(r, use_bin_type=True) for r in flat[:-1]))


def _events(n: int = 12) -> list[dict]:
    return [{"type": "call", "req": i // 3, "i": i} for i in range(n)]


LOST_EVIDENCE = {
    # name: chunks of records (the sync and end records are computed from what the writer first wrote)
    "a record dropped": lambda ev: [ev[:5] + ev[6:8], ev[8:]],
    "a record duplicated": lambda ev: [ev[:8] + [ev[7]], ev[8:]],
    "two records swapped": lambda ev: [ev[:3] + [ev[4], ev[3]] + ev[5:8], ev[8:]],
    "a record changed": lambda ev: [ev[:3] + [{**ev[3], "i": 99}] + ev[4:8], ev[8:]],
}


@pytest.mark.parametrize("name", sorted(LOST_EVIDENCE))
def test_a_record_lost_or_altered_after_writing_is_corruption(tmp_path, name):
    """The sync and end records carry the count and CRC of the records the writer wrote: a record dropped,
    duplicated, reordered or changed afterwards (chunks re-encoded with valid chunk checksums) is refused."""
    ev = _events()
    good = _doc_read(_doc_file([[V11], ev[:8], ev[8:]]))  # as written: sync and end records for these records
    bad = LOST_EVIDENCE[name](ev)
    chunks = [good[0], [*bad[0], good[1][-1]], [*bad[1], good[2][-1]]]
    path = tmp_path / "m.badc"
    path.write_bytes(b"".join(map(_doc_chunk, chunks)))
    with pytest.raises(TraceFormatError, match="dropped|added|reordered"):
        _consume(path)
    path.write_bytes(b"".join(map(_doc_chunk, good)))  # the same file unmutated reads
    assert [r["i"] for r in read_trace(path)] == list(range(12))


def test_framing_records_out_of_place_are_corruption(tmp_path):
    ev = _events()
    good = _doc_file([[V11], ev[:6], ev[6:]])
    head = _doc_read(good)[0]  # the header and its sync record
    cases = {
        "bytes after the end record": good + _doc_file([[V11], ev[:2]]),  # a whole trace appended
        "second header": _doc_file([[V11], ev[:3] + [V11] + ev[3:6], ev[6:]]),
        "records after the end record": _doc_chunk(head) + _doc_chunk([*ev[:3], {"type": "end", "records": 5},
                                                                        *ev[3:]]),
        "does not end with its sync record": _doc_chunk(head) + _doc_chunk(ev),
        "after the end record": good + b"\x00" * 40,  # garbage appended
    }
    for fragment, data in cases.items():
        path = tmp_path / "f.badc"
        path.write_bytes(data)
        with pytest.raises(TraceFormatError, match=fragment):
            _consume(path)


def test_a_1_0_file_is_checked_by_its_end_record_count(tmp_path):
    """A 1.0 file has no sync records: its end record's count still catches a dropped or added record."""
    v10 = {**V11, "version": [1, 0]}
    ev = _events(6)
    path = tmp_path / "old.badc"
    path.write_bytes(_doc_file([[v10], ev], synced=False))
    assert len(list(read_trace(path))) == 6
    path.write_bytes(_doc_chunk([v10]) + _doc_chunk([*ev[1:], {"type": "end", "records": 7}]))
    with pytest.raises(TraceFormatError, match="counts 7 records, the file holds 6"):
        _consume(path)
