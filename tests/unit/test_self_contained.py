"""The repository stands alone: a reader who cloned only it can follow every comment in it.

Development notes that are not part of the repository must not be cited: a reader cannot follow "see contracts
9.1". (Machine paths are checked by test_examples.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_CITATION = re.compile(
    r"spec/(contracts|algorithms|kopf-python)|contracts\.md|algorithms\.md|kopf-python\.md|DESIGN\.md|\.\./shared"
    r"|\bcontracts? \d+(\.\d+)?\b", re.IGNORECASE)
_TEXT = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".cfg", ".txt", ".tpl", ".sh", ""}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / line for line in out.splitlines() if Path(line).suffix in _TEXT]


def test_no_file_cites_development_notes() -> None:
    this = Path(__file__).resolve()
    hits = []
    for path in _tracked():
        if path.resolve() == this or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if _CITATION.search(line):
                hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:120]}")
    assert not hits, "state the rule instead of citing notes outside the repository:\n" + "\n".join(hits)


def test_the_check_catches_a_citation() -> None:
    assert _CITATION.search("(contract 9.1)") and _CITATION.search("see spec/algorithms.md 5.2")
    assert not _CITATION.search('{"op": "add", "path": "/spec/volumes"}')
