"""Build (once) and cache the control plane's binaries outside the work tree.

Every binary lives in `~/.cache/kai-dev/bin/<piece>-<key>/`, where the key covers the pinned version, the Go
toolchain and, for our own multi-call `kube` binary, its sources. A second `kai dev up` finds them and starts in
seconds; the Go build and module caches (also outside the tree) make a rebuild after a version bump incremental.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from operators.devcluster import versions

CACHE = Path(os.environ.get("KAI_DEV_CACHE", Path.home() / ".cache" / "kai-dev"))
REPO = Path(__file__).resolve().parents[2]
KUBE_SOURCES = REPO / "e2e" / "kube"
NODE_SOURCES = REPO / "e2e" / "node"
TOOLS = REPO / "e2e" / "tools"
KUBE_TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
NODE_TOOLS = ("kubelet", "kube-proxy")


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Binaries:
    kube_dir: Path  # holds `kube` and a symlink per tool in KUBE_TOOLS
    kwok: Path
    ray_operator: Path
    helm: Path
    kuberay_crds: Path

    def tool(self, name: str) -> Path:
        return self.kube_dir / name

    @property
    def kubectl(self) -> Path:
        return self.tool("kubectl")


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise BuildError("Go is needed to build the local control plane; install Go >= 1.25 and retry")
    return go


def _go_version(go: str) -> str:
    return subprocess.run([go, "env", "GOVERSION"], check=True, capture_output=True, text=True).stdout.strip()


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def _run(cmd: list[str], *, cwd: Path | None, log: Path, env: dict[str, str]) -> None:
    print(f"  $ {' '.join(cmd)}  (log: {log})", file=sys.stderr, flush=True)
    with log.open("ab") as out:
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise BuildError(f"build failed: {' '.join(cmd)}\n  log: {log}\n" + "\n".join(tail))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-buildvcs=false")
    return env


def _kube_ldflags() -> str:
    major, minor = versions.KUBERNETES.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={versions.KUBERNETES}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


def _build_kube(go: str, gover: str, env: dict[str, str]) -> Path:
    sources = sorted(KUBE_SOURCES.glob("*.go")) + [KUBE_SOURCES / "go.mod", KUBE_SOURCES / "go.sum"]
    digest = _key(versions.KUBERNETES, gover, _kube_ldflags(), *(p.read_text() for p in sources))
    out = CACHE / "bin" / f"kube-{versions.KUBERNETES}-{digest}"
    if (out / "kube").exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"building Kubernetes {versions.KUBERNETES} (etcd, apiserver, controller-manager, scheduler, kubectl); "
          "the first build takes a while", file=sys.stderr, flush=True)
    _run([go, "build", "-ldflags", _kube_ldflags(), "-o", str(tmp / "kube"), "."],
         cwd=KUBE_SOURCES, log=CACHE / "build-kube.log", env=env)
    for tool in KUBE_TOOLS:
        (tmp / tool).symlink_to("kube")
    tmp.rename(out)
    return out


def _build_node(go: str, gover: str, env: dict[str, str]) -> Path:
    """The real node's agents (kubelet, kube-proxy) from the sibling module e2e/node, its static `pause` and the
    test image's `apiget`.

    A module of their own, so that the control plane's `kube` binary (and its cache key) stays as it is; the Go
    build cache shares every package the two have in common, so only the node's own packages are compiled.
    """
    sources = sorted(NODE_SOURCES.rglob("*.go")) + [NODE_SOURCES / "go.mod", NODE_SOURCES / "go.sum"]
    digest = _key(versions.KUBERNETES, gover, _kube_ldflags(), *(p.read_text() for p in sources))
    out = CACHE / "bin" / f"node-{versions.KUBERNETES}-{digest}"
    if all((out / name).exists() for name in ("node", "pause", "apiget")):
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"building Kubernetes {versions.KUBERNETES} node agents (kubelet, kube-proxy)", file=sys.stderr, flush=True)
    log = CACHE / "build-node.log"
    _run([go, "build", "-ldflags", _kube_ldflags(), "-o", str(tmp / "node"), "."], cwd=NODE_SOURCES, log=log,
         env=env)
    for program in ("pause", "apiget"):  # static: the images that hold them have no C library
        _run([go, "build", "-ldflags", "-s -w", "-o", str(tmp / program), f"./{program}"], cwd=NODE_SOURCES,
             log=log, env={**env, "CGO_ENABLED": "0"})
    for tool in NODE_TOOLS:
        (tmp / tool).symlink_to("node")
    tmp.rename(out)
    return out


def ensure_node_binaries() -> Path:
    """The directory holding kubelet, kube-proxy, pause and apiget, built if missing (under the same lock)."""
    import fcntl

    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        go = _go()
        return _build_node(go, _go_version(go), _env())


def _build_tool(go: str, gover: str, env: dict[str, str], name: str, version: str, package: str) -> Path:
    """Build a pinned upstream command from its module under e2e/tools/<name> (go.mod with a `tool` line).

    A module of ours rather than `go install pkg@version`: the proxy refuses the version listing some modules
    need for `go install`'s deprecation check (KubeRay), and go.sum pins every dependency.
    """
    module = TOOLS / name
    digest = _key(version, gover, (module / "go.mod").read_text(), (module / "go.sum").read_text())
    out = CACHE / "bin" / f"{name}-{version}-{digest}"
    binary = out / name
    if binary.exists():
        return binary
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"building {name} {version}", file=sys.stderr, flush=True)
    _run([go, "build", "-ldflags", "-s -w", "-o", str(tmp / name), package], cwd=module,
         log=CACHE / f"build-{name}.log", env=env)
    tmp.rename(out)
    return binary


def _kuberay_crds(go: str, env: dict[str, str]) -> Path:
    out = CACHE / "kuberay-crds" / versions.KUBERAY
    if out.exists() and any(out.glob("*.yaml")):
        return out
    proc = subprocess.run([go, "mod", "download", "-json", versions.KUBERAY_PACKAGE], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        raise BuildError(f"cannot download {versions.KUBERAY_PACKAGE}: {proc.stderr or proc.stdout}")
    import json

    module_dir = Path(json.loads(proc.stdout)["Dir"])
    out.mkdir(parents=True, exist_ok=True)
    for crd in sorted((module_dir / "config" / "crd" / "bases").glob("*.yaml")):
        shutil.copyfile(crd, out / crd.name)
    return out


def ensure_binaries() -> Binaries:
    """Return the cached binaries, building whatever is missing (one builder at a time: a file lock)."""
    import fcntl

    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_binaries()


def _ensure_binaries() -> Binaries:
    go = _go()
    gover = _go_version(go)
    env = _env()
    kube_dir = _build_kube(go, gover, env)
    kwok = _build_tool(go, gover, env, "kwok", versions.KWOK, versions.KWOK_COMMAND)
    ray_operator = _build_tool(go, gover, env, "ray-operator", versions.KUBERAY, versions.KUBERAY_MODULE)
    helm = _build_tool(go, gover, env, "helm", versions.HELM, versions.HELM_COMMAND)
    crds = _kuberay_crds(go, env)
    return Binaries(kube_dir=kube_dir, kwok=kwok, ray_operator=ray_operator, helm=helm, kuberay_crds=crds)


def main() -> int:
    try:
        bins = ensure_binaries()
        node_dir = ensure_node_binaries()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in vars(bins).items():
        print(f"{name}: {path}")
    print(f"node_dir: {node_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
