"""Channel R's bookkeeping, the same for every engine: which returned records (logprobs, scores) did not
match their documented values, by draw and by position, and the first mismatch in words."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def returns_with_records(trace_path: str, carries: Callable[[dict[str, Any]], bool]) -> Iterator[
        tuple[list[int], dict[str, Any]]]:
    """(prompt, return record) of every request whose return record carries records (`carries`)."""
    from badc_trace.format import read_trace

    prompt: list[int] = []
    for rec in read_trace(trace_path, allow_torn_tail=True):
        if rec["type"] == "request":
            prompt = rec["prompt"]
        elif rec["type"] == "return" and carries(rec):
            yield prompt, rec


class RecordTally:
    """Draws with records, draws with a mismatch, mismatches per output position, the first mismatch."""

    def __init__(self) -> None:
        self.draws = self.mismatched = 0
        self.positions: dict[int, int] = {}
        self.first: dict[str, Any] | None = None
        self._bad = False

    def start_draw(self) -> None:
        self.draws += 1
        self._bad = False

    def mismatch(self, request: int, position: int, **detail: Any) -> None:
        """A returned record at output `position` (1-based) of the current draw differs from its
        documented value; `detail` (expected, seen, ...) describes the first one."""
        self.positions[position] = self.positions.get(position, 0) + 1
        self.mismatched += not self._bad
        self._bad = True
        if self.first is None:
            self.first = {"request": request, "position": position, **detail}

    def to_dict(self) -> dict[str, Any]:
        return {"draws": self.draws, "mismatch": self.mismatched, "positions": self.positions,
                "first_mismatch": self.first}
