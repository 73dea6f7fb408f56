"""The project's documentation is in the repository: every file the code and docs cite by path exists, and
nothing cites a file outside the repository (a design note that is not shipped)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / f for f in out.stdout.split()]


def test_every_cited_document_is_in_the_repository():
    missing, outside = [], []
    for f in tracked("*.py", "*.md", "*.toml"):
        text = f.read_text(errors="replace")
        if re.search(r"\bDESIGN\.md\b|\.\./shared/", text) and f.name != "test_docs.py":
            outside.append(str(f.relative_to(ROOT)))
        for cited in re.findall(r"\b(docs/[\w/.-]+\.md)\b", text):
            if not (ROOT / cited).is_file():
                missing.append(f"{f.relative_to(ROOT)}: {cited}")
    assert not outside, f"cite a file outside the repository: {outside}"
    assert not missing, missing
