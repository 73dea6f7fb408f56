"""Trace format v1: chunked, individually compressed msgpack records.

The byte layout is specified in docs/trace-format.md; this module is its reference implementation.
Each chunk is a 32-byte zstd *skippable* frame (the chunk descriptor) followed by one zstd frame
holding whole msgpack records, so a trace is still a valid zstd stream (`zstd -d` yields the raw
msgpack). The descriptor carries lengths, a record count and CRCs so a reader can bound every
allocation before it makes it, and can tell a torn tail (the file ends inside a chunk, or without
the end record) from corruption (bytes that are present but wrong). From version 1.1 every chunk ends
with a `sync` record (and the last with the `end` record) holding the count and CRC-32 of every record
before it, so a record dropped, duplicated, reordered or changed anywhere before it is corruption too.
"""

from __future__ import annotations

import io
import os
import struct
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, compress, islice, repeat
from operator import not_
from typing import IO, Any

import msgpack
import zstandard

FORMAT_NAME = "badc-trace"
FORMAT_VERSION = (1, 1)

SKIPPABLE_MAGIC = 0x184D2A5B  # one of zstd's 16 skippable-frame magics
DESCRIPTOR_TAG = b"BDC1"
_DESC = struct.Struct("<II4sIIII")  # magic, frame size, tag, comp_len, raw_len, n_records, raw_crc
DESCRIPTOR_SIZE = _DESC.size + 4  # + CRC32 of the preceding 24 bytes

# Reader limits. The writer never exceeds them; a file that declares more is rejected before any
# allocation, so a hostile file costs at most these many bytes of memory.
MAX_RAW_CHUNK = 16 * 1024 * 1024
MAX_COMPRESSED_CHUNK = MAX_RAW_CHUNK + 65536
MAX_RECORDS_PER_CHUNK = 1_000_000
MAX_DEPTH = 32
MAX_WINDOW = 1 << 23

HEADER_FIELDS = {"engine": str, "build": str, "config": dict, "seal": str}
# Records the format itself writes; the reader checks and consumes them (iteration never yields them).
FRAMING = frozenset({"header", "sync", "end"})


class TraceFormatError(ValueError):
    """A trace file is not valid v1; ``offset`` is the byte offset where reading failed."""

    def __init__(self, path: str, offset: int, message: str):
        self.path = path
        self.offset = offset
        self.reason = message
        super().__init__(f"{path}: byte {offset}: {message}")


class TornTailError(TraceFormatError):
    """The file ends inside a chunk or without its end record: a writer that did not close."""


@dataclass(frozen=True)
class TornTail:
    offset: int  # start of the first chunk that is not whole, or the file size
    reason: str


class TraceWriter:
    """Appends records; flushes whole chunks so a crash loses at most the chunk being filled.

    A chunk is written when it reaches ``chunk_bytes`` or ``chunk_records``, when ``flush_seconds``
    have passed since the last write, on ``flush()`` and on ``close()``. ``fsync=True`` also asks
    the OS to persist each chunk (survives power loss, not only a process crash).

    ``resume_at=(offset, records)``, a ``position()`` taken earlier, reopens an unclosed trace and goes
    on writing after its first ``offset`` bytes (``records`` whole records, the header included); what
    follows them, records of work that was lost, is cut off.

    Each chunk ends with a ``sync`` record, the last with the ``end`` record: the number of records
    before it and the CRC-32 of their msgpack bytes, which the reader checks.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        engine: str,
        build: str,
        config: Mapping[str, Any] | None = None,
        seal: str = "",
        chunk_bytes: int = 256 * 1024,
        chunk_records: int = 65536,
        flush_seconds: float = 2.0,
        level: int = 3,
        fsync: bool = False,
        resume_at: tuple[int, int] | None = None,
    ):
        if chunk_bytes > MAX_RAW_CHUNK // 2:
            raise ValueError(f"chunk_bytes must be at most {MAX_RAW_CHUNK // 2}")
        self.path = os.fspath(path)
        if resume_at is None:
            self._file: IO[bytes] = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        else:
            self._file = open(self.path, "r+b")  # noqa: SIM115 - closed in close()
            if os.fstat(self._file.fileno()).st_size < resume_at[0]:
                self._file.close()
                raise TraceFormatError(self.path, resume_at[0], "cannot resume: the file ends before this offset")
            self._file.truncate(resume_at[0])
            self._file.seek(resume_at[0])
            self._file.flush()
        self._cctx = zstandard.ZstdCompressor(level=level, write_content_size=True)
        self._packer = msgpack.Packer(use_bin_type=True)  # one for every record: packb makes one per call
        self._buf: list[bytes] = []
        self._buf_bytes = 0
        self._chunk_bytes = chunk_bytes
        self._chunk_records = chunk_records
        self._flush_seconds = flush_seconds
        self._last_flush = time.monotonic()
        self._fsync = fsync
        self.records_written = 0 if resume_at is None else resume_at[1]
        self._crc = 0  # CRC-32 of every record written so far (their packed bytes, in order)
        if resume_at is not None:  # the header is already there; the CRC goes on from the records kept
            records, self._crc = prefix_crc(self.path, resume_at[0])
            if records != resume_at[1]:
                self._file.close()
                raise TraceFormatError(self.path, resume_at[0], f"cannot resume: {records} records before this "
                                                                f"offset, the checkpoint says {resume_at[1]}")
            return
        header = {
            "type": "header",
            "format": FORMAT_NAME,
            "version": list(FORMAT_VERSION),
            "engine": engine,
            "build": build,
            "config": dict(config or {}),
            "seal": seal,
            "created": time.time(),
        }
        self.write(header)
        self.flush()

    def write(self, record: Mapping[str, Any]) -> None:
        if self._file.closed:
            raise ValueError(f"trace {self.path} is closed")
        packed = self._packer.pack(record)
        if len(packed) > MAX_RAW_CHUNK // 2:
            raise ValueError(f"record of {len(packed)} bytes exceeds the trace limit")
        if self._buf_bytes + len(packed) > self._chunk_bytes and self._buf:
            self.flush()
        self._buf.append(packed)
        self._buf_bytes += len(packed)
        self.records_written += 1
        if (
            len(self._buf) >= self._chunk_records
            or self._buf_bytes >= self._chunk_bytes
            or time.monotonic() - self._last_flush >= self._flush_seconds
        ):
            self.flush()

    def flush(self) -> None:
        self._write_chunk(closing=False)

    def _write_chunk(self, closing: bool) -> None:
        if not self._buf and not closing:
            return
        body = b"".join(self._buf)
        self._crc = zlib.crc32(body, self._crc)
        # The chunk's last record: the count and CRC of every record before it (the end record on close)
        last = {"type": "end" if closing else "sync", "records": self.records_written, "crc": self._crc}
        tail = self._packer.pack(last)
        self._buf.append(tail)
        self.records_written += 1
        self._crc = zlib.crc32(tail, self._crc)
        raw = body + tail
        comp = self._cctx.compress(raw)
        desc = _DESC.pack(
            SKIPPABLE_MAGIC, DESCRIPTOR_SIZE - 8, DESCRIPTOR_TAG, len(comp), len(raw), len(self._buf),
            zlib.crc32(raw),
        )
        # One write call per chunk: a kill lands before it, after it, or tears only this chunk.
        self._file.write(desc + struct.pack("<I", zlib.crc32(desc)) + comp)
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self._buf.clear()
        self._buf_bytes = 0
        self._last_flush = time.monotonic()

    def position(self) -> tuple[int, int]:
        """Flush, then (bytes, records) written so far: where ``resume_at`` can go on from."""
        self.flush()
        return self._file.tell(), self.records_written

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        if self._file.closed:
            return
        self._write_chunk(closing=True)
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CONTAINERS = frozenset({dict, list})  # what msgpack unpacks maps and arrays to
# what msgpack packs and unpacks as they are (the sink passes such records to the packer untouched)
_LEAVES = frozenset({int, float, str, bytes, bool, type(None)})
_LEAVES_AND_LIST = _LEAVES | {list}
_DICT, _LIST, _STR = frozenset({dict}), frozenset({list}), frozenset({str})


def _check_depth(obj: Any, path: str, offset: int) -> None:
    # Level by level and without recursion, so a deep record cannot exhaust the interpreter's stack;
    # only containers go on to the next level (a record's token-id lists are most of its values).
    level = [obj] if isinstance(obj, dict | list) else []
    depth = 1
    while level:
        nxt: list[Any] = []
        for item in level:
            values = item.values() if isinstance(item, dict) else item
            if values and depth == MAX_DEPTH:  # its values sit one level deeper than the limit
                raise TraceFormatError(path, offset, f"record nested deeper than {MAX_DEPTH} levels")
            if not _CONTAINERS.isdisjoint(map(type, values)):  # in C: most values are leaves
                nxt += [v for v in values if isinstance(v, dict | list)]
        level = nxt
        depth += 1


class TraceReader:
    """Streams the records of a trace in constant memory (one chunk at a time).

    Iterating yields every record after the header (available as ``header``), sync and end records
    excluded; ``chunk_offset`` and ``chunk_record`` say where the record last yielded is.
    On a torn tail, iteration raises :class:`TornTailError` after the last whole chunk's records,
    unless ``allow_torn_tail`` is set, in which case it stops and sets ``torn_tail``. Any other
    defect raises :class:`TraceFormatError` with the byte offset.
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_torn_tail: bool = False):
        self._open(path)
        self.allow_torn_tail = allow_torn_tail
        self.torn_tail: TornTail | None = None
        self.complete = False
        self._synced = False  # a 1.1+ file: every chunk ends with a sync or end record with a CRC
        self.chunk_offset = 0  # where the chunk of the record last yielded starts, and its index there
        self.chunk_record = 0
        self._chunks = self._iter_chunks()
        self._pending: list[Any] = []
        try:
            self.header = self._read_header()
        except BaseException:
            self.close()
            raise

    def _open(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file: IO[bytes] = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        self._size = os.fstat(self._file.fileno()).st_size
        self._dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)

    # -- chunk level -------------------------------------------------------------------------
    def _fail(self, offset: int, message: str) -> TraceFormatError:
        return TraceFormatError(self.path, offset, message)

    def _torn(self, offset: int, message: str) -> TornTailError:
        return TornTailError(self.path, offset, message)

    def _raw_chunks(self, stop: int | None = None) -> Iterator[tuple[int, bytes, int, int]]:
        """(chunk offset, decompressed body, declared record count, body offset) of each chunk, up to
        byte `stop` (a chunk boundary) or the end of the file."""
        offset = 0
        end = self._size if stop is None else stop
        while offset < end:
            desc = self._file.read(DESCRIPTOR_SIZE)
            if len(desc) < DESCRIPTOR_SIZE:
                raise self._torn(offset, f"file ends inside a chunk descriptor ({len(desc)} of "
                                         f"{DESCRIPTOR_SIZE} bytes)")
            magic, fsize, tag, comp_len, raw_len, n_records, raw_crc = _DESC.unpack_from(desc)
            (desc_crc,) = struct.unpack_from("<I", desc, _DESC.size)
            if magic != SKIPPABLE_MAGIC or tag != DESCRIPTOR_TAG:
                raise self._fail(offset, "not a badc trace chunk descriptor (bad magic)")
            if fsize != DESCRIPTOR_SIZE - 8 or zlib.crc32(desc[: _DESC.size]) != desc_crc:
                raise self._fail(offset, "chunk descriptor checksum mismatch (corrupt descriptor)")
            if comp_len > MAX_COMPRESSED_CHUNK or raw_len > MAX_RAW_CHUNK:
                raise self._fail(offset, f"chunk declares {comp_len} compressed / {raw_len} raw bytes, "
                                         f"over the limit of {MAX_RAW_CHUNK}")
            if n_records == 0 or n_records > min(MAX_RECORDS_PER_CHUNK, raw_len):
                raise self._fail(offset, f"chunk declares an impossible record count {n_records}")
            body_at = offset + DESCRIPTOR_SIZE
            comp = self._file.read(comp_len)
            if len(comp) < comp_len:
                raise self._torn(offset, f"file ends inside a chunk ({len(comp)} of {comp_len} "
                                         "compressed bytes present)")
            raw = self._decompress(comp, raw_len, body_at)
            if zlib.crc32(raw) != raw_crc:
                raise self._fail(body_at, "chunk content checksum mismatch (corrupt data)")
            yield offset, raw, n_records, body_at
            offset = body_at + comp_len

    def _iter_chunks(self) -> Iterator[tuple[int, list[Any]]]:
        """Each chunk's records, its framing checked: one header, first; sync and end records only last in
        their chunk, each holding the count and CRC-32 of every record before it (what follows the end record
        is refused by the iteration that reaches it, `_check_nothing_after`)."""
        seen = 0  # records before this chunk
        crc = 0
        for offset, raw, n_records, body_at in self._raw_chunks():
            records = self._unpack(raw, n_records, body_at)
            framing = [i for i, t in enumerate(map(dict.get, records, repeat("type"))) if t in FRAMING]
            for i in framing:
                kind = records[i]["type"]
                if kind == "header":
                    if seen + i:
                        raise self._fail(body_at, f"record {i} of chunk is a second header (two traces spliced?)")
                    version = records[i].get("version")
                    self._synced = (isinstance(version, list) and len(version) == 2
                                    and all(type(v) is int for v in version) and version[0] == 1
                                    and version[1] >= 1)
                elif i != n_records - 1:
                    raise self._fail(body_at, f"record {i} of chunk is a {kind!r} record before the chunk's end "
                                              f"({'records after the end record' if kind == 'end' else 'misplaced'})")
                else:
                    tail = msgpack.packb(records[i], use_bin_type=True)
                    if not raw.endswith(tail):
                        raise self._fail(body_at, f"the {kind!r} record is not in its canonical encoding")
                    before = zlib.crc32(raw[: len(raw) - len(tail)], crc)
                    want = seen + i  # the records before it
                    got = records[i].get("records")
                    if type(got) is not int or got != want:
                        raise self._fail(body_at, f"the {kind!r} record counts {got!r} records, the file holds "
                                                  f"{want}: records were dropped or added")
                    if "crc" in records[i] and records[i]["crc"] != before:
                        raise self._fail(body_at, f"the {kind!r} record's CRC-32 of the records before it does not "
                                                  "match them: records were dropped, duplicated, reordered or "
                                                  "changed")
                    if self._synced and "crc" not in records[i]:
                        raise self._fail(body_at, f"the {kind!r} record has no 'crc' (format 1.1 needs one)")
            if self._synced and records[-1]["type"] not in ("sync", "end"):
                raise self._fail(body_at, "chunk does not end with its sync record (format 1.1 ends every chunk "
                                          "with one)")
            seen += n_records
            crc = zlib.crc32(raw, crc)
            yield offset, records

    def _decompress(self, comp: bytes, raw_len: int, at: int) -> bytes:
        try:
            declared = zstandard.frame_content_size(comp)
        except zstandard.ZstdError as e:
            raise self._fail(at, f"bad zstd frame header: {e}") from None
        if declared != raw_len:
            raise self._fail(at, f"zstd frame declares {declared} bytes, descriptor says {raw_len}")
        out = io.BytesIO()
        try:
            # Streaming with a hard cap: a decompression bomb stops at raw_len + 1 bytes.
            with self._dctx.stream_reader(io.BytesIO(comp), read_across_frames=False) as r:
                while out.tell() <= raw_len:
                    piece = r.read(min(65536, raw_len + 1 - out.tell()))
                    if not piece:
                        break
                    out.write(piece)
        except zstandard.ZstdError as e:
            raise self._fail(at, f"zstd decompression failed: {e}") from None
        if out.tell() != raw_len:
            raise self._fail(at, f"chunk decompresses to {out.tell()}+ bytes, expected {raw_len}")
        return out.getvalue()

    def _unpacker(self, raw: bytes) -> msgpack.Unpacker:
        unpacker = msgpack.Unpacker(
            raw=False, strict_map_key=True, use_list=True, max_buffer_size=max(len(raw), 1),
            max_ext_len=0,
        )
        unpacker.feed(raw)
        return unpacker

    def _unpack(self, raw: bytes, n_records: int, at: int) -> list[Any]:
        """The chunk's records, each a map with a string `type`, nested at most MAX_DEPTH levels. The
        checks run over the whole chunk in C (a chunk holds thousands of records); a chunk that fails
        one is read again record by record, for the message that names what is wrong."""
        try:
            records = list(islice(self._unpacker(raw), n_records + 1))  # memory bounded by the declared count
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError):
            return self._unpack_each(raw, n_records, at)
        if (len(records) == n_records and _DICT.issuperset(map(type, records))
                and _STR.issuperset(map(type, map(dict.get, records, repeat("type"))))):
            flat = map(_CONTAINERS.isdisjoint, map(map, repeat(type), map(dict.values, records)))
            nested = list(compress(records, map(not_, flat)))  # records with lists or maps in them
            # most hold leaves and lists of leaves (token ids), two levels deep: checked here, in C
            two = list(map(_LEAVES_AND_LIST.issuperset, map(map, repeat(type), map(dict.values, nested))))
            values = list(chain.from_iterable(map(dict.values, compress(nested, two))))
            lists = compress(values, map(_LIST.__contains__, map(type, values)))
            deeper = compress(nested, map(not_, two)) if _LEAVES.issuperset(map(type, chain.from_iterable(lists))) \
                else nested
            try:
                for rec in deeper:
                    _check_depth(rec, self.path, at)
                return records
            except TraceFormatError:
                pass
        return self._unpack_each(raw, n_records, at)

    def _unpack_each(self, raw: bytes, n_records: int, at: int) -> list[Any]:
        unpacker = self._unpacker(raw)
        records = []
        try:
            for rec in unpacker:
                if len(records) >= n_records:
                    raise self._fail(at, f"chunk holds more than its declared {n_records} records")
                if not isinstance(rec, dict):
                    raise self._fail(at, f"record {len(records)} of chunk is a {type(rec).__name__}, "
                                         "expected a map")
                if not _CONTAINERS.isdisjoint(map(type, rec.values())):  # a flat record (most) is checked here, in C
                    _check_depth(rec, self.path, at)
                if not isinstance(rec.get("type"), str):
                    raise self._fail(at, f"record {len(records)} of chunk has no string 'type' field")
                records.append(rec)
        except TraceFormatError:
            raise
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as e:
            raise self._fail(at, f"malformed msgpack record: {type(e).__name__}: {e}") from None
        if len(records) != n_records:
            raise self._fail(at, f"chunk holds {len(records)} whole records, declared {n_records}")
        return records

    # -- record level ------------------------------------------------------------------------
    def _next_chunk(self) -> tuple[int, list[Any]] | None:
        try:
            return next(self._chunks)
        except StopIteration:
            return None

    def _read_header(self) -> dict[str, Any]:
        if self._size == 0:
            raise self._fail(0, "empty file: no header")
        chunk = self._next_chunk()
        assert chunk is not None
        offset, records = chunk
        header = records[0]
        if header.get("type") != "header" or header.get("format") != FORMAT_NAME:
            raise self._fail(offset, "first record is not a badc-trace header")
        version = header.get("version")
        if not (isinstance(version, list) and len(version) == 2 and all(type(v) is int for v in version)):
            raise self._fail(offset, "header field 'version' must be [major, minor]")
        if version[0] != FORMAT_VERSION[0]:
            raise self._fail(offset, f"trace format version {version[0]}.{version[1]} is not readable "
                                     f"by this reader (major {FORMAT_VERSION[0]})")
        for name, typ in HEADER_FIELDS.items():
            if not isinstance(header.get(name), typ):
                raise self._fail(offset, f"header field {name!r} must be a {typ.__name__}")
        self._pending = records[1:]
        self._base = 1
        return header

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            while True:
                for i, rec in enumerate(self._pending, self._base):
                    kind = rec["type"]
                    if kind == "sync":
                        continue
                    if kind == "end":
                        self._check_nothing_after()
                        self.complete = True
                        return
                    self.chunk_record = i
                    yield rec
                try:
                    chunk = self._next_chunk()
                except TornTailError as e:
                    if not self.allow_torn_tail:
                        raise
                    self.torn_tail = TornTail(e.offset, e.reason)
                    return
                if chunk is None:
                    reason = "no end record: the writer did not close the trace"
                    if not self.allow_torn_tail:
                        raise self._torn(self._size, reason)
                    self.torn_tail = TornTail(self._size, reason)
                    return
                self.chunk_offset, self._pending = chunk
                self._base = 0
        finally:
            self.close()

    def _check_nothing_after(self) -> None:
        """The end record is the last record of the file: anything after it (a chunk, or bytes that are not
        one) was appended after the writer closed the trace, and no reader may ignore it."""
        at = self._file.tell()
        if at == self._size:
            return
        try:
            self._next_chunk()
        except TraceFormatError as e:
            raise self._fail(at, f"{self._size - at} bytes after the end record ({e.reason})") from None
        raise self._fail(at, f"{self._size - at} bytes after the end record (a chunk appended after the writer "
                             "closed the trace)")

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prefix_crc(path: str | os.PathLike[str], offset: int) -> tuple[int, int]:
    """(records, CRC-32 of their bytes) in the whole chunks of a trace's first `offset` bytes: where a
    writer resuming at `offset` goes on from."""
    reader = TraceReader.__new__(TraceReader)
    reader._open(path)
    records = crc = 0
    try:
        for _, raw, n_records, _ in reader._raw_chunks(stop=offset):
            records += n_records
            crc = zlib.crc32(raw, crc)
        if reader._file.tell() != offset:
            raise reader._fail(offset, "cannot resume: this offset is not a chunk boundary")
    finally:
        reader.close()
    return records, crc


def read_trace(path: str | os.PathLike[str], *, allow_torn_tail: bool = False) -> TraceReader:
    """Open a trace for streaming; see :class:`TraceReader`."""
    return TraceReader(path, allow_torn_tail=allow_torn_tail)
