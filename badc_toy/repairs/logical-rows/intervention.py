"""Runtime intervention for the repaired arm, made on one ToyEngine.

`apply(engine)` removes the planted read defects D1 (processors see the row's logical prefix, not the
buffer), D2 (a fresh processor replayed along each row's prefix) and D3 (stopping after every committed
token). Speculation stays on; D4 (records) is left as it is. Returns the undo.
"""

from __future__ import annotations

from typing import Any

REPAIR_ID = "toy/logical-rows"
FIXED = frozenset({"D1", "D2", "D3"})


def apply(engine: Any) -> Any:
    before = engine.defects
    engine.defects = before - FIXED

    def undo() -> None:
        engine.defects = before

    return undo
