"""What `badc run` returns: the campaign's report as one frozen typed object, from which report.json and
report.md are written.

Read its fields by name (`report.configs`, `report.pending`). It is also a read-only mapping with
report.json's keys (`report["configs"]`), so code written against the JSON reads the object the same way;
a key the run did not produce (`pending` of a complete run, `exact_tol` without the exact channel) is
absent, as in the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final


class _Absent:
    """A report.json key this run does not write (not None: None is written, as `null`)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


@dataclass(frozen=True)
class CampaignReport(Mapping[str, Any]):
    """One campaign's report. `configs` has a row per config in campaign order (a decided config's
    decision, its exact channel beside it, the other tests; an undecided one's reason); `pending` lists
    the configs a partial report has not decided (absent when the report is complete)."""

    campaign: str
    seal: str
    alpha: float
    threshold: float
    m: int
    exact_only: bool | _Absent = ABSENT
    exact_tol: float | _Absent = ABSENT
    confirm_m: int | _Absent = ABSENT
    anytime: list[dict[str, Any]] | None | _Absent = ABSENT
    draws: int = 0
    confirm_draws: int | _Absent = ABSENT
    confirm_anytime: list[dict[str, Any]] | None | _Absent = ABSENT
    confirm_draws_needed: int | None | _Absent = ABSENT
    confirmation_attempts: tuple[str, ...] | _Absent = ABSENT
    interrupted: bool | _Absent = ABSENT
    jobs_reused: int | _Absent = ABSENT
    draws_resumed: int | _Absent = ABSENT
    elapsed_s: float = 0.0
    worker_core_hours: dict[str, float | None] | _Absent = ABSENT
    code_versions: dict[str, int] | _Absent = ABSENT
    laws_code_versions: dict[str, int] | _Absent = ABSENT
    configs: tuple[dict[str, Any], ...] = ()
    pending: tuple[dict[str, Any], ...] | _Absent = ABSENT

    @property
    def complete(self) -> bool:
        """Every config decided (or computed, for the exact channel alone): report.json, not report-partial."""
        return self.pending is ABSENT

    @property
    def name(self) -> str:
        """The file stem it is written under."""
        return "report" if self.complete else "report-partial"

    def to_dict(self) -> dict[str, Any]:
        """report.json's content."""
        return {k: self[k] for k in self}

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, ABSENT) if key in _FIELDS else ABSENT
        if value is ABSENT:
            raise KeyError(key)
        return list(value) if isinstance(value, tuple) else value  # as the JSON has it

    def __iter__(self) -> Iterator[str]:
        return (k for k in _FIELDS if getattr(self, k) is not ABSENT)

    def __len__(self) -> int:
        return sum(1 for _ in self)


_FIELDS: Final = tuple(f.name for f in dataclasses.fields(CampaignReport))
