"""`kai dev image`: build the product's image from the repository's Dockerfile, with no registry and no daemon.

Three cached pieces, each keyed by what it is made of, all under `~/.cache/kai-dev/image/`:
- the base: a Debian root filesystem made by mmdebstrap from Debian's packages (python3, python3-venv), keyed by
  suite, package list, mirror and a date pin (bump BASE_DATE to take Debian's updates), committed as the image
  `localhost/kai-base:<suite>-<key>`;
- the image: `buildah bud --layers` of the Dockerfile on that base (BASE_IMAGE build argument) in a storage root
  of our own; the Dockerfile's layer order makes a code change rebuild only the project layer;
- an archive of the image (docker-archive), tagged by the sources' digest, which `ctr images import` loads into
  the real node's containerd (`kai dev import-image`; the chart runs it with `imagePullPolicy: IfNotPresent`).
The builders (mmdebstrap, buildah) are installed with apt-get when missing.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from operators.devcluster import build

BASE_SUITE = "bookworm"
BASE_MIRROR = "http://deb.debian.org/debian"
# `passwd` for the Dockerfile's useradd; python3-venv brings ensurepip's wheels.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "passwd")
BASE_DATE = "2026-11-26"  # the date pin: part of the base's key, so a new date builds a fresh base
REPOSITORY = "localhost/kai-scheduler"
IMAGE_DIR = build.CACHE / "image"
# The commands we need, and the Debian package of each.
TOOLS = {"mmdebstrap": "mmdebstrap", "buildah": "buildah"}
# What the Dockerfile copies (.dockerignore says the same).
SOURCES = ("Dockerfile", "pyproject.toml", "README.md", "operators")
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's path, in the base as on the host


class ImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class Image:
    ref: str  # localhost/kai-scheduler:<version>-<digest>
    archive: Path  # docker-archive for `ctr images import`

    @property
    def repository(self) -> str:
        return self.ref.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.ref.rsplit(":", 1)[1]


def base_key(suite: str = BASE_SUITE, packages: tuple[str, ...] = BASE_PACKAGES, mirror: str = BASE_MIRROR,
             date: str = BASE_DATE) -> str:
    return hashlib.sha256("\n".join([suite, mirror, date, *sorted(packages)]).encode()).hexdigest()[:12]


def _source_files(repo: Path) -> Iterator[Path]:
    for name in SOURCES:
        path = repo / name
        if path.is_file():
            yield path
            continue
        for sub in sorted(path.rglob("*")):
            if sub.is_file() and "__pycache__" not in sub.parts and sub.suffix != ".pyc":
                yield sub


def source_digest(repo: Path = build.REPO) -> str:
    """Digest of everything the image is built from (paths and contents): the image's tag."""
    h = hashlib.sha256()
    for path in _source_files(repo):
        h.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def image_ref(version: str, digest: str) -> str:
    return f"{REPOSITORY}:{version}-{digest}"


def _version(repo: Path) -> str:
    import tomllib

    return str(tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"])


def ensure_tools() -> None:
    """Install the builders from Debian's packages, only those missing."""
    missing = sorted({pkg for cmd, pkg in TOOLS.items() if shutil.which(cmd) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageError(f"install {' '.join(missing)} (Debian packages) to build the image")
    print(f"installing {' '.join(missing)} with apt-get", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = IMAGE_DIR / "apt.log"
    _run(["apt-get", "update", "-q"], log=log, env=env)
    _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], log=log, env=env)


def _run(cmd: list[str], *, log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise ImageError(f"failed: {' '.join(cmd)}\n  log: {log}\n{tail}")


def _buildah() -> list[str]:
    """buildah on our own storage root (overlay; no daemon, no system-wide state)."""
    return ["buildah", "--root", str(IMAGE_DIR / "storage"), "--runroot", str(IMAGE_DIR / "run"),
            "--storage-driver", "overlay"]


def _has_image(ref: str) -> bool:
    return subprocess.run([*_buildah(), "inspect", "--type", "image", ref], capture_output=True).returncode == 0


def ensure_base() -> str:
    """The local Debian base image (built and committed once per key); returns its reference."""
    key = base_key()
    ref = f"localhost/kai-base:{BASE_SUITE}-{key}"
    if _has_image(ref):
        return ref
    log = IMAGE_DIR / "base.log"
    tarball = IMAGE_DIR / f"base-{BASE_SUITE}-{key}.tar"
    if not tarball.exists():
        print(f"building the Debian {BASE_SUITE} base ({', '.join(BASE_PACKAGES)}) with mmdebstrap",
              file=sys.stderr, flush=True)
        tmp = tarball.with_suffix(".tmp.tar")
        # The essential set plus our packages: no apt, no docs beyond what dpkg installs; a fixed mtime.
        _run(["mmdebstrap", "--variant=essential", f"--include={','.join(BASE_PACKAGES)}", "--mode=root",
              "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
              "--dpkgopt=path-exclude=/usr/share/locale/*", BASE_SUITE, str(tmp), BASE_MIRROR],
             log=log, env={**os.environ, "SOURCE_DATE_EPOCH": str(_epoch(BASE_DATE))})
        tmp.rename(tarball)
    container = subprocess.run([*_buildah(), "from", "scratch"], capture_output=True, text=True, check=True
                               ).stdout.strip()
    try:
        _run([*_buildah(), "add", container, str(tarball), "/"], log=log)
        _run([*_buildah(), "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "--env", "LANG=C.UTF-8", "--cmd", "/bin/bash", container], log=log)
        _run([*_buildah(), "commit", "--rm", container, ref], log=log)
    except ImageError:
        subprocess.run([*_buildah(), "rm", container], capture_output=True)
        raise
    return ref


def _epoch(date: str) -> int:
    import datetime

    return int(datetime.datetime.fromisoformat(date).replace(tzinfo=datetime.UTC).timestamp())


def build_image(repo: Path = build.REPO) -> Image:
    """Build (or find) the image of the sources in `repo` and its archive; one builder at a time."""
    IMAGE_DIR.mkdir(parents=True, exist_ok=True)
    with open(IMAGE_DIR / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_tools()
        ref = image_ref(_version(repo), source_digest(repo))
        archive = IMAGE_DIR / "archives" / f"kai-scheduler-{ref.rsplit(':', 1)[1]}.tar"
        if archive.exists():
            return Image(ref, archive)
        base = ensure_base()
        log = IMAGE_DIR / "build.log"
        print(f"building {ref} on {base}", file=sys.stderr, flush=True)
        _run([*_buildah(), "bud", "--layers", "--isolation", "chroot", "--pull-never", *_host_trust(),
              "--build-arg", f"BASE_IMAGE={base}", "-t", ref, "-f", str(repo / "Dockerfile"), str(repo)],
             log=log)
        archive.parent.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        _run([*_buildah(), "push", ref, f"docker-archive:{tmp}:{ref}"], log=log)
        tmp.rename(archive)
        _prune_archives(archive.parent, keep=archive)
        return Image(ref, archive)


def _host_trust() -> list[str]:
    """The build's RUN steps trust the host's CA bundle (it may hold an egress proxy's CA for PyPI): mounted
    over the base's bundle while a step runs, never stored in a layer."""
    bundle = Path(os.environ.get("SSL_CERT_FILE") or HOST_CA_BUNDLE)
    return ["--volume", f"{bundle}:{HOST_CA_BUNDLE}:ro"] if bundle.is_file() else []


def _prune_archives(directory: Path, keep: Path, count: int = 3) -> None:
    """Keep the newest few archives (an upgrade test needs the previous one), remove older ones."""
    others = sorted((p for p in directory.glob("kai-scheduler-*.tar") if p != keep),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[count - 1:]:
        old.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kai dev image", description=__doc__.splitlines()[0])
    p.parse_args(argv)
    started = time.monotonic()
    try:
        image = build_image()
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{image.ref} in {time.monotonic() - started:.1f}s; import it into a running cluster's real node with "
          f"`kai dev import-image {image.archive}`", file=sys.stderr)
    print(image.ref)
    return 0
