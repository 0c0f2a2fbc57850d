"""Code quality is part of the suite: ruff over the tree, mypy over the package (strict on the pure core)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def test_ruff_is_clean() -> None:
    proc = subprocess.run([_tool("ruff"), "check", "operators", "tests", "e2e", "bench", "conftest.py"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean() -> None:
    proc = subprocess.run([_tool("mypy"), "operators"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
