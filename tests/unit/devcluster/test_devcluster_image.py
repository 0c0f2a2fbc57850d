"""The image build's cache keys: the base by suite, packages, mirror and date pin; the image by its sources only."""

from __future__ import annotations

import shutil
from pathlib import Path

from operators.devcluster import build, image


def test_base_key_changes_with_each_pin_and_not_with_package_order() -> None:
    key = image.base_key()
    assert image.base_key(packages=tuple(reversed(image.BASE_PACKAGES))) == key
    assert image.base_key(suite="trixie") != key
    assert image.base_key(date="2027-01-01") != key
    assert image.base_key(packages=(*image.BASE_PACKAGES, "curl")) != key
    assert image.base_key(mirror="http://mirror.example/debian") != key


def _copy_sources(dst: Path) -> Path:
    for name in image.SOURCES:
        src = build.REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copyfile(src, dst / name)
    return dst


def test_source_digest_follows_the_code_and_ignores_bytecode_and_other_files(tmp_path: Path) -> None:
    repo = _copy_sources(tmp_path)
    digest = image.source_digest(repo)
    (repo / "operators" / "__pycache__").mkdir(exist_ok=True)
    (repo / "operators" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    (repo / "notes.txt").write_text("not in the image")
    assert image.source_digest(repo) == digest
    with (repo / "operators" / "components.py").open("a") as f:
        f.write("# one more line\n")
    assert image.source_digest(repo) != digest


def test_the_dockerignore_lets_in_exactly_the_sources_the_digest_covers() -> None:
    allowed = {line[1:].rstrip("/") for line in (build.REPO / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert allowed | {"Dockerfile"} == set(image.SOURCES)


def test_image_reference_is_local_and_keyed_by_version_and_sources() -> None:
    ref = image.image_ref("0.1.0", "abc123def456")
    assert ref == "localhost/kai-scheduler:0.1.0-abc123def456"
    img = image.Image(ref, Path("x.tar"))
    assert (img.repository, img.tag) == ("localhost/kai-scheduler", "0.1.0-abc123def456")
