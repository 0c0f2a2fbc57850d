"""The real node's pure parts: addresses per slot, slot claims, configuration files, the OCI archive writer,
and the node module's pins (same Kubernetes as the control plane)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from operators.devcluster import build, versions
from operators.devcluster.node import cgroups, configs, ociimage, slots
from operators.devcluster.node.addresses import NodeAddresses


def test_node_module_pins_the_control_planes_kubernetes() -> None:
    text = (build.NODE_SOURCES / "go.mod").read_text()
    assert re.search(r"^\s*k8s\.io/kubernetes (v\S+)", text, re.M).group(1) == versions.KUBERNETES  # type: ignore[union-attr]
    staging = set(re.findall(r"^\s*k8s\.io/\S+ => k8s\.io/\S+ (v\S+)", text, re.M))
    assert staging == {versions.KUBERNETES.replace("v1.", "v0.")}


def test_every_module_both_node_and_control_plane_need_is_at_one_version() -> None:
    # Equal versions let the Go build cache compile each shared package once for both binaries.
    def requires(module_dir: Path) -> dict[str, str]:
        lines = (module_dir / "go.mod").read_text().splitlines()
        return dict(ln.split()[:2] for ln in lines if ln.startswith("\t") and "=>" not in ln)

    kube, node = requires(build.KUBE_SOURCES), requires(build.NODE_SOURCES)
    assert {m: (kube[m], node[m]) for m in kube.keys() & node.keys() if kube[m] != node[m]} == {}


def test_addresses_are_keyed_by_slot_and_never_overlap() -> None:
    a, b = NodeAddresses(0, "one"), NodeAddresses(7, "two")
    assert (a.service_cidr, a.kubernetes_service_ip) == ("10.96.0.0/16", "10.96.0.1")
    assert (b.host_ip, b.node_ip, b.pod_cidr, b.service_cidr) == ("10.201.7.1", "10.201.7.2", "10.202.7.0/24",
                                                                  "10.103.0.0/16")
    assert a.host_veth != b.host_veth and len(NodeAddresses(63, "x" * 60).node_veth) <= 15
    assert a.netns == "kai-dev-one" and a.cgroup == "kai-dev-one"
    with pytest.raises(ValueError):
        NodeAddresses(64, "three")


def test_slots_are_held_while_locked_and_taken_over_when_stale(tmp_path: Path) -> None:
    cleaned: list[tuple[str, int]] = []
    running = {"two"}

    def claim(name: str) -> int:
        return slots.claim(tmp_path, name, alive=lambda other: other in running,
                           clean=lambda other, slot: cleaned.append((other, slot)))

    assert (claim("one"), claim("two")) == (0, 1)
    # A process of "one" (here a copy of the descriptor, as a child inherits it) still holds the lock after `up`
    # hands it over: the slot stays "one"'s.
    held = slots.held("one")
    assert held is not None
    child = os.dup(held)
    slots.hand_over("one")
    assert claim("three") == 2 and cleaned == []
    os.close(child)  # the last process of "one" is gone: its slot is stale, cleaned and taken over
    assert claim("four") == 0 and cleaned == [("one", 0)] and slots.owner(tmp_path, 0) == "four"
    # Unlocked but its API server runs (a cluster started by an older `kai dev`): never taken over.
    slots.hand_over("two")
    assert claim("five") == 3 and cleaned == [("one", 0)]
    running.clear()
    slots.release(tmp_path, "two")
    assert slots.slot_of(tmp_path, "two") is None and not (tmp_path / "slot-1").exists()
    assert claim("six") == 1 and cleaned == [("one", 0)]


def test_slots_name_the_running_clusters_when_all_are_taken(tmp_path: Path) -> None:
    for slot in range(64):
        assert slots.claim(tmp_path, f"c{slot}", alive=lambda _: False, clean=lambda *_: None) == slot
    with pytest.raises(slots.SlotError, match="c0, c1"):
        slots.claim(tmp_path, "new", alive=lambda _: False, clean=lambda *_: None)
    for slot in range(64):
        slots.release(tmp_path, f"c{slot}")
    assert list(tmp_path.iterdir()) == []


def test_configuration_files_keep_everything_under_the_clusters_state(tmp_path: Path) -> None:
    paths, addrs = configs.NodePaths(tmp_path / "node"), NodeAddresses(3, "c")
    toml = configs.containerd_config(paths)
    assert f'address = "{paths.containerd_socket}"' in toml and f'root = "{paths.containerd_root}"' in toml
    assert f'sandbox_image = "{configs.PAUSE_IMAGE}"' in toml and "SystemdCgroup = false" in toml
    assert f'conf_dir = "{paths.cni_conf_dir}"' in toml
    cni = json.loads(configs.cni_conflist(paths, addrs))
    ipam = cni["plugins"][0]["ipam"]
    assert ipam["ranges"] == [[{"subnet": "10.202.3.0/24", "gateway": "10.202.3.1"}]]
    assert ipam["dataDir"] == str(paths.cni_ipam_dir)
    kubelet = yaml.safe_load(configs.to_yaml(configs.kubelet_config(paths, addrs, tmp_path / "ca.crt")))
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupRoot"] == "/kai-dev-c"
    assert kubelet["registerWithTaints"] == [{"key": configs.SYSTEM_TAINT_KEY, "value": "true",
                                              "effect": "NoSchedule"}]
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{paths.containerd_socket}"
    assert kubelet["podLogsDir"] == str(paths.pod_logs) and kubelet["address"] == "10.201.3.2"
    proxy = configs.proxy_config(paths, addrs)
    assert proxy["mode"] == "iptables" and proxy["clusterCIDR"] == "10.202.3.0/24"
    for text in (toml, json.dumps(cni), json.dumps(kubelet), json.dumps(proxy)):
        assert "/var/lib/" not in text and "/run/containerd" not in text


def test_oci_archive_is_reproducible_and_self_consistent(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF fake")
    binary.chmod(0o755)
    spec = ociimage.ImageSpec(name="kai.local/tool:2", files={"/bin/tool": binary}, symlinks={"/bin/sh": "tool"},
                              dirs=("/tmp",), entrypoint=("/bin/tool",))
    first = ociimage.write_archive(spec, tmp_path / "a.tar").read_bytes()
    assert ociimage.write_archive(spec, tmp_path / "b.tar").read_bytes() == first
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    for name, blob in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(blob).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(files["index.json"])
    [entry] = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "kai.local/tool:2"
    manifest = json.loads(files["blobs/" + entry["digest"].replace(":", "/")])
    config = json.loads(files["blobs/" + manifest["config"]["digest"].replace(":", "/")])
    assert config["config"]["Entrypoint"] == ["/bin/tool"] and config["os"] == "linux"
    layer = files["blobs/" + manifest["layers"][0]["digest"].replace(":", "/")]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/tool"].mode == 0o755 and members["bin/sh"].linkname == "tool"
    assert members["tmp"].mode == 0o1777 and members["bin"].isdir()


def test_cgroups_v1_copies_cpusets_and_v2_hands_controllers_down(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = tmp_path / "v1"
    for controller in ("cpuset", "memory"):
        (v1 / controller).mkdir(parents=True)
        (v1 / controller / "cgroup.procs").write_text("")
    (v1 / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (v1 / "cpuset" / "cpuset.mems").write_text("0\n")
    original_mkdir = Path.mkdir

    def mkdir_like_cgroupfs(self: Path, *args: object, **kwargs: object) -> None:
        original_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]
        if self.parent.name in ("cpuset", "kai-dev-c") and "cpuset" in str(self):
            for name in ("cpuset.cpus", "cpuset.mems"):
                (self / name).write_text("")  # a new v1 cpuset starts empty

    monkeypatch.setattr(Path, "mkdir", mkdir_like_cgroupfs)
    monkeypatch.setattr(cgroups, "CGROUP_FS", v1)
    cgroups.create("kai-dev-c")
    assert (v1 / "cpuset" / "kai-dev-c" / "node" / "cpuset.cpus").read_text() == "0-1"
    assert (v1 / "memory" / "kai-dev-c" / "node").is_dir()

    v2 = tmp_path / "v2"
    original_mkdir(v2)
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (v2 / "cgroup.subtree_control").write_text("")
    (v2 / "cgroup.procs").write_text("")
    writes: list[tuple[str, str]] = []
    original_write = Path.write_text

    def record(self: Path, data: str, *args: object, **kwargs: object) -> int:
        if self.name == "cgroup.subtree_control":
            writes.append((self.parent.name, data))
        return original_write(self, data, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", record)
    monkeypatch.setattr(cgroups, "CGROUP_FS", v2)
    assert cgroups.hierarchies() == [v2]
    cgroups.create("kai-dev-c")
    assert [w for w in writes if w[0] == "v2"] == [("v2", f"+{c}") for c in ("cpu", "cpuset", "memory", "pids", "io")]
    assert (v2 / "kai-dev-c" / "node").is_dir() and ("kai-dev-c", "+io") in writes
