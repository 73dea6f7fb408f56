"""Calibration (A5): the speculation-off arm must agree with the exact law P of the kernel oracle."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALLOWANCE = 0.005


@dataclass(frozen=True)
class Calibration:
    passed: bool | None  # None: no reference law, so calibration could not run
    off_violations: int
    worst_event: str | None  # the event with the largest L_off(A) - P(A)
    worst_excess: float | None


def calibrate(event_ids: list[str], lower_off: np.ndarray, p_ref: np.ndarray | None,
              off_violations: int) -> Calibration:
    """Void on a speculation-off contract violation or any event with L_off(A) > P(A) + 0.005."""
    if p_ref is None:
        return Calibration(None, off_violations, None, None)
    excess = lower_off - p_ref
    i = int(np.argmax(excess))
    passed = off_violations == 0 and bool(excess[i] <= ALLOWANCE)
    return Calibration(passed, off_violations, event_ids[i], float(excess[i]))
