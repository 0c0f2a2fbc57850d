"""The repository is self-contained: the README's example paths exist, every example is exercised by a test,
and no file names a path of a particular machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support import EXAMPLES

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_PATH = re.compile(r"(?<![\w/])examples/[\w./-]+\.yaml")  # not e2e/examples/
# Paths outside the repository or of one machine (built from parts so that this file does not match itself).
# The kernel's and the OS's own interfaces a real node uses (/sys, /proc, /run, /var, /bin) are the same on every
# machine, and allowed.
MACHINE_PATH = re.compile("|".join([r"\.\./" + "shared", "/" + "work/",
                                    r"Path\([\"']/(?!(?:sys|proc|run|var|bin)(?:[/\"']))[a-z]"]))


def quickstart() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Quickstart on the local control plane")
    return text[start:text.index("\n## ", start + 1)]


def test_readme_quickstart_example_paths_exist() -> None:
    paths = sorted(set(EXAMPLE_PATH.findall(quickstart())))
    assert len(paths) >= 8, paths  # the quickstart walks through the examples
    missing = [p for p in paths if not (REPO / p).is_file()]
    assert not missing, f"README quickstart names example files that do not exist: {missing}"
    every = {str(p.relative_to(REPO)) for p in EXAMPLES.rglob("*") if p.is_file()}
    assert set(EXAMPLE_PATH.findall((REPO / "README.md").read_text())) <= every


def test_every_example_is_used_by_a_test() -> None:
    examples = sorted(p for p in EXAMPLES.rglob("*") if p.is_file())
    assert examples, f"no examples in {EXAMPLES}"
    sources = [p for folder in ("tests", "e2e") for p in (REPO / folder).rglob("*.py")
               if p.resolve() != Path(__file__).resolve()]
    text = "\n".join(p.read_text() for p in sources)
    unused = [str(p.relative_to(REPO)) for p in examples if not re.search(f'["/]{re.escape(p.name)}"', text)]
    assert not unused, f"examples no test uses: {unused}"


def test_no_path_outside_the_repository_or_of_a_machine() -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = [REPO / name for name in tracked.decode().split("\0") if name]
    assert len(files) > 50, "git ls-files listed almost nothing"
    found = []
    for path in files:
        if path.resolve() == Path(__file__).resolve() or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                  if MACHINE_PATH.search(line)]
    assert not found, "paths outside the repository or of one machine:\n" + "\n".join(found)
