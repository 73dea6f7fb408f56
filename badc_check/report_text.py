"""Human-readable rendering of decisions for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from badc_check.decide import ConfigDecision, contract_lines


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def decisions_table(decisions: Sequence[ConfigDecision], settings: dict[str, Any], anytime: bool = False) -> str:
    head = (f"alpha {settings['alpha']} family-wise over m = {settings['m']}, threshold {settings['threshold']}, "
            f"bounds: {'anytime confidence sequences' if anytime else 'one-sided Clopper-Pearson'}")
    cols = ["id", "decision", "eligible", "D", "D crash-free", "witnesses", "draws on/off", "crashes on/off",
            "proposed", "calibration", "hypothesis", "contract"]
    rows = []
    for d in decisions:
        hyp = "-" if d.hypothesis is None else (
            f"{d.hypothesis.id}: {'compatible' if d.hypothesis.compatible else 'incompatible'}"
            f", null {'rejected' if d.hypothesis.null_rejected else 'not rejected'}")
        rows.append([d.id, d.decision, _fmt(d.eligible), _fmt(d.D), _fmt(d.D_crash_free), str(d.witnesses.count),
                     f"{d.draws['on']}/{d.draws['off']}", f"{d.crashes['on']}/{d.crashes['off']}",
                     _fmt(d.exercise["proposed"]), _fmt(d.calibration.passed), hyp,
                     (d.contract or {}).get("status", "unchecked")])
    widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows, strict=True)]
    lines = [head, "", "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in rows]
    for d in decisions:
        lines.append(f"\n{d.id}: {d.decision}. D attained on {d.channel_s.argmax}; {d.family_size} events, "
                     f"B = {d.bounds}, tail {d.channel_s.tail:.3g}; family from {d.family_source}.")
        lines += [f"  - {r}" for r in d.reasons]
        lines += [f"  - {r}" for r in contract_lines(d.contract, d.decision)]
        w = d.without_hypothesis_events
        if w:
            lines.append(f"  - without A_H and its complement (the same draws, {w['events']} events): {w['decision']}, "
                         f"D {_fmt(w['D'])} on {w['D_event']}")
        if d.witnesses.outcomes:
            shown = ", ".join(f"{y!r} x{k}" for y, k in list(d.witnesses.outcomes.items())[:5])
            lines.append(f"  witnesses: {shown}")
    return "\n".join(lines)
