"""PNG plots of a campaign: per config, the on and off probabilities of the events that matter most,
with their simultaneous bounds and the reference law P."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from badc_check.bounds import cp_lower, cp_upper

TOP = 20


def plot_config(path: Path, title: str, events: list[str], p_ref: np.ndarray | None, on: np.ndarray, n_on: int,
                off: np.ndarray, n_off: int, tail: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(events))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(events) + 2), 4.5))
    for arm, k, n, dx, color in (("off", off, n_off, -0.15, "tab:blue"), ("on", on, n_on, 0.15, "tab:red")):
        est = k / n
        lo, hi = cp_lower(k, n, tail), cp_upper(k, n, tail)
        ax.errorbar(x + dx, est, yerr=[est - lo, hi - est], fmt="o", color=color, capsize=3, label=f"{arm} (n={n:,})")
    if p_ref is not None:  # a model without an exact law has no P
        ax.scatter(x, p_ref, marker="_", s=300, color="black", label="P (kernel oracle)", zorder=3)
    ax.set_xticks(x, events, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("probability")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_campaign(out: Path, report: Mapping[str, Any],
                  decided: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> list[Path]:
    """One PNG per decided config under out/plots/, the events with the largest |on - off| first.
    `decided` maps a config id to its laws and merged arms, as the runner decided them."""
    from badc_check.decide import event_family

    (out / "plots").mkdir(exist_ok=True)
    written = []
    for c in report["configs"]:
        if c["id"] not in decided or c.get("D") is None:
            continue
        laws, arms = decided[c["id"]]
        on, off = arms["on"], arms["off"]
        hyp = laws.get("hypothesis")
        predicates = {name: frozenset(ys) for name, ys in laws.get("predicates", {}).items()}
        fam = event_family(laws["reference"], (hyp["id"], hyp["law"]) if hyp else None, predicates,
                           (laws.get("pilot") or {}).get("outcomes"))
        k_on, k_off = fam.counts(on.outcomes), fam.counts(off.outcomes)
        n_on, n_off = on.draws, off.draws
        base = len(fam.base)  # complements mirror the base events; plot the base ones
        gap = np.abs(k_on[:base] / n_on - k_off[:base] / n_off)
        idx = np.argsort(-gap)[:TOP]
        path = out / "plots" / f"{c['id']}.png"
        plot_config(path, f"{c['id']} ({c['engine']} {c['build']}): {c['decision']}, D = {c['D']:.4f}",
                    [fam.events[i].id for i in idx],
                    None if laws["reference"] is None else fam.probabilities(laws["reference"])[idx], k_on[idx], n_on,
                    k_off[idx], n_off, c["tail"])
        written.append(path)
    return written
