"""Write a single-layer OCI image archive (the `oci-archive` layout `ctr images import` reads), with no registry.

Used for the images the real node needs and no registry can give us here: the pod sandbox (our static `pause`)
and the tests' image (Debian's static busybox). The archive is reproducible: fixed mtimes and owners, sorted
entries, so the same inputs give the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class ImageSpec:
    name: str  # a full reference, e.g. `kai.local/pause:1`
    files: dict[str, Path]  # path in the image -> file on the host (copied with its mode)
    symlinks: dict[str, str] = field(default_factory=dict)  # path in the image -> target
    dirs: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/bin",)
    user: str = ""


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.mode, info.size, info.mtime, info.uid, info.gid = kind, mode, size, 0, 0, 0
    return info


def layer_tar(spec: ImageSpec) -> bytes:
    """The one layer: parent directories first, then every entry in path order."""
    entries: dict[str, tuple[bytes, bytes | str | None, int]] = {}
    for path in [*spec.dirs, *spec.files, *spec.symlinks]:
        for parent in list(Path(path).parents)[:-1]:  # all but "/"
            entries.setdefault(str(parent), (tarfile.DIRTYPE, None, 0o755))
    for path in spec.dirs:
        entries[path] = (tarfile.DIRTYPE, None, 0o1777 if path == "/tmp" else 0o755)
    for path, source in spec.files.items():
        entries[path] = (tarfile.REGTYPE, source.read_bytes(), source.stat().st_mode & 0o7777)
    for path, target in spec.symlinks.items():
        entries[path] = (tarfile.SYMTYPE, target, 0o777)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):
            kind, payload, mode = entries[path]
            if kind == tarfile.REGTYPE:
                assert isinstance(payload, bytes)
                tar.addfile(_info(path, kind, mode, len(payload)), io.BytesIO(payload))
            elif kind == tarfile.SYMTYPE:
                info = _info(path, kind, mode)
                info.linkname = str(payload)
                tar.addfile(info)
            else:
                tar.addfile(_info(path, kind, mode))
    return out.getvalue()


def _descriptor(media_type: str, blob: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(blob).hexdigest(), "size": len(blob)}


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_archive(spec: ImageSpec, out: Path) -> Path:
    """Write the archive to `out` (atomically) and return it."""
    layer = layer_tar(spec)
    config_obj: dict[str, object] = {"Env": list(spec.env), "WorkingDir": "/"}
    if spec.entrypoint:
        config_obj["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd:
        config_obj["Cmd"] = list(spec.cmd)
    if spec.user:
        config_obj["User"] = spec.user
    config = _json({"architecture": "amd64", "os": "linux", "config": config_obj,
                    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}})
    manifest = _json({"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "config": _descriptor(CONFIG_TYPE, config),
                      "layers": [_descriptor(LAYER_TYPE, layer)]})
    tag = spec.name.rsplit(":", 1)[1] if ":" in spec.name.rsplit("/", 1)[-1] else "latest"
    index = _json({"schemaVersion": 2, "manifests": [{
        **_descriptor(MANIFEST_TYPE, manifest),
        "annotations": {"io.containerd.image.name": spec.name, "org.opencontainers.image.ref.name": tag}}]})
    files = {"oci-layout": _json({"imageLayoutVersion": "1.0.0"}), "index.json": index}
    for blob in (layer, config, manifest):
        files["blobs/sha256/" + hashlib.sha256(blob).hexdigest()] = blob
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("blobs", "blobs/sha256"):
            tar.addfile(_info(directory, tarfile.DIRTYPE, 0o755))
        for name in sorted(files):
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(files[name])), io.BytesIO(files[name]))
    tmp.replace(out)
    return out
