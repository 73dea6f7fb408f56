"""Token ids as text in replay and diff messages, where the trace knows the tokenizer.

A probe that can reach the engine's tokenizer writes its pieces once per process (a `vocab` record: one
byte string per token id, what the engine's own detokenizer gives for that id alone); text is their
concatenation, decoded as UTF-8 with replacement (`Engine.decoder`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from badc_trace.format import read_trace

Decoder = Callable[[Sequence[int]], str]
SHOWN = 60  # characters of text shown beside a list of ids (the tail: where the positions differ)


def pieces_decoder(pieces: Sequence[bytes | str]) -> Decoder:
    table = [p.encode() if isinstance(p, str) else bytes(p) for p in pieces]

    def decode(ids: Sequence[int]) -> str:
        return b"".join(table[i] if 0 <= i < len(table) else f"<{i}>".encode() for i in ids).decode(
            "utf-8", errors="replace")
    return decode


def trace_vocab(paths: Sequence[str]) -> list[bytes] | None:
    """The first vocabulary of a run's traces (probes write it before a process's first request, so
    each trace is read only up to its first request record)."""
    for path in paths:
        reader = read_trace(path, allow_torn_tail=True)
        try:
            for rec in reader:
                if rec.get("type") == "vocab" and isinstance(rec.get("pieces"), list):
                    return rec["pieces"]
                if rec.get("type") == "request":
                    break
        finally:
            reader.close()
    return None


def ids_text(ids: Any, decode: Decoder | None) -> str | None:
    """The text of a list of token ids (its last SHOWN characters), or None when it is not one or no
    decoder is known."""
    if decode is None or not isinstance(ids, list | tuple) or not all(type(i) is int for i in ids):
        return None
    try:
        text = decode(list(ids))
    except Exception:  # a decoder that cannot take these ids: show the ids alone
        return None
    return repr(text if len(text) <= SHOWN else "…" + text[-SHOWN:])


def trace_decoder(engine: Any, paths: Sequence[str], header: Mapping[str, Any],
                  vocab: list[bytes] | None = None) -> Decoder | None:
    """ids -> text for a run's traces, when they know the tokenizer (`engine.decoder`, the traces' engine;
    `vocab`: their vocabulary, when already read); never an error (text beside ids is never a reason for a
    replay or a diff to fail)."""
    try:
        return engine.decoder(header, vocab if vocab is not None else trace_vocab(paths))
    except Exception:
        return None
