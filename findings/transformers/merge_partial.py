"""Merge campaign-report-200000.md (13 configs decided in a first output folder of this seal, lost
with its machine) with the kept folder's newer partial report: rows and sections in roster order, the
newer one's where both have a config (they must agree). Used as

    BADC_PARTIAL=1 tools/paper_transformers.sh findings/transformers/campaign-200000
    python3.11 findings/transformers/merge_partial.py findings/transformers/campaign-report-200000.md \\
        findings/transformers/campaign-200000/report-partial.md campaigns/transformers.toml /tmp/merged.md
    cp /tmp/merged.md findings/transformers/campaign-report-200000.md
"""

import re
import sys
import tomllib
from pathlib import Path

ORIGIN = ("Decided from two output folders of this seal: the HF12, HF17, HFX and HF24-N0 rows from the first one, "
          "lost with its machine on 2026-11-30 after they were written down here; the others from "
          "`campaign-200000/`, kept in git (`BADC_PARTIAL=1 tools/paper_transformers.sh "
          "findings/transformers/campaign-200000` re-decides them).")


def parse(text: str) -> tuple[list[str], list[str], dict[str, str], dict[str, list[str]]]:
    """The lines above the table, the table's two header lines, its rows by config, and the sections by
    config (and PENDING)."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("| config | engine"))
    head, table_head = [ln for ln in lines[:i] if not ln.startswith("Decided from two output folders")], lines[i:i + 2]
    i += 2
    rows: dict[str, str] = {}
    while i < len(lines) and lines[i].startswith("| "):
        rows[lines[i].split("|")[1].strip()] = lines[i]
        i += 1
    sections: dict[str, list[str]] = {}
    current = None
    for ln in lines[i:]:
        m = re.match(r"## (\S+): ", ln)
        if ln.startswith("## Pending") or m:
            current = "PENDING" if ln.startswith("## Pending") else m.group(1)
            sections[current] = []
        if current:
            sections[current].append(ln)
    return head, table_head, rows, sections


def main(old: str, new: str, toml: str, dest: str) -> None:
    roster = [c["id"] for c in tomllib.loads(Path(toml).read_text())["config"]]
    old_head, _, old_rows, old_sections = parse(Path(old).read_text())
    head, table_head, new_rows, new_sections = parse(Path(new).read_text())
    if old_head[2] != head[2]:
        sys.exit(f"{old} and {new} differ in seal or settings:\n{old_head[2]}\n{head[2]}")
    if differ := [c for c in set(old_rows) & set(new_rows) if old_rows[c] != new_rows[c]]:
        sys.exit(f"the two reports decide {', '.join(sorted(differ))} differently")
    rows, sections = {**old_rows, **new_rows}, {**old_sections, **new_sections}
    n, decided = len(rows), [c for c in roster if c in rows]
    if n < len(roster):
        head = [re.sub(r"\*\*Partial report: \d+ of", f"**Partial report: {n} of", ln) for ln in head]
    else:  # whole: no pending configs to point to
        head = [f"**All {n} configs decided**, each with the whole roster's m." if ln.startswith("**Partial report:")
                else ln for ln in head]
    out = [*head, ORIGIN, "", *table_head, *(rows[c] for c in decided), ""]
    for c in decided:
        body = sections[c]
        while body and not body[-1]:
            body.pop()
        out += [*body, ""]
    if n < len(roster):  # the pending table, less the configs the old report decided
        out += [ln for ln in new_sections.get("PENDING", [])
                if not (ln.startswith("| ") and ln.split("|")[1].strip() in rows)]
    Path(dest).write_text("\n".join(out).rstrip("\n") + "\n")
    print(f"{n} of {len(roster)} decided -> {dest}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
