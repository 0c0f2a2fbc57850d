"""The node's local images, built here (no registry is reachable) and imported into its containerd with `ctr`.

- `kai.local/pause:1`: the pod sandbox, our static `pause` program alone (built with the node's binaries);
- `kai.local/busybox:1`: a test image, Debian's static busybox with a link per applet (`sh`, `wget`, `httpd`...),
  and our `apiget`, an in-cluster API client (busybox's TLS cannot talk to the API server).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from operators.devcluster.node.configs import CONTAINERD_NAMESPACE, PAUSE_IMAGE, NodePaths
from operators.devcluster.node.ociimage import ImageSpec, write_archive

BUSYBOX_IMAGE = "kai.local/busybox:1"
BUSYBOX = Path("/bin/busybox")  # where Debian's busybox-static package (hostpackages installs it) puts the binary


class ImageError(RuntimeError):
    pass


def pause_spec(pause_binary: Path) -> ImageSpec:
    return ImageSpec(name=PAUSE_IMAGE, files={"/pause": pause_binary}, entrypoint=("/pause",), env=(),
                     user="65535:65535")


def busybox_spec(apiget: Path, busybox: Path = BUSYBOX) -> ImageSpec:
    listing = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    applets = {f"/bin/{name}": "busybox" for name in listing.split() if name != "busybox"}
    return ImageSpec(name=BUSYBOX_IMAGE, files={"/bin/busybox": busybox, "/bin/apiget": apiget}, symlinks=applets,
                     dirs=("/tmp", "/etc", "/root"), cmd=("sh",))


def ctr(paths: NodePaths) -> list[str]:
    return ["ctr", "--address", str(paths.containerd_socket), "--namespace", CONTAINERD_NAMESPACE]


def import_archive(paths: NodePaths, archive: Path) -> None:
    """Import an OCI or docker image archive into the node's containerd, unpacked for the CRI plugin."""
    proc = subprocess.run([*ctr(paths), "images", "import", "--no-unpack=false", str(archive)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"importing {archive} into the node's containerd failed: "
                         f"{(proc.stderr or proc.stdout).strip()}")


def image_names(paths: NodePaths) -> list[str]:
    proc = subprocess.run([*ctr(paths), "images", "list", "--quiet"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"listing the node's images failed: {proc.stderr.strip()}")
    return proc.stdout.split()


def import_local_images(paths: NodePaths, pause_binary: Path, apiget_binary: Path) -> None:
    for spec in (pause_spec(pause_binary), busybox_spec(apiget_binary)):
        archive = write_archive(spec, paths.images / (spec.name.split("/")[-1].replace(":", "-") + ".tar"))
        import_archive(paths, archive)
