"""`kai dev down` stops every process `kai dev up` started and removes the state; `up` works again after."""

from __future__ import annotations

import os
from pathlib import Path

from operators.devcluster import cluster as dev


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_up_down_up_down() -> None:
    opts = dev.Options(name="lifecycle", nodes=1, gpus=2, port_base=18000, kuberay=False, components=False)
    for _ in range(2):
        state = dev.up(opts)
        pids = dict(state.pids)
        assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} <= set(pids)
        assert all(_alive(p) for p in pids.values())
        assert dev.down("lifecycle", quiet=True)
        assert not [name for name, pid in pids.items() if _alive(pid)]
        assert not Path(state.dir).exists()


def test_failed_start_names_the_piece_and_its_log() -> None:
    opts = dev.Options(name="broken", nodes=1, port_base=18100, kuberay=False, components=False)
    root = dev.state_dir("broken")
    root.mkdir(parents=True, exist_ok=True)
    (root / "etcd").write_text("not a directory: etcd cannot use it as its data dir")
    try:
        dev.up(opts)
    except dev.StartError as exc:
        message = str(exc)
    else:
        raise AssertionError("up should have failed")
    finally:
        dev.down("broken", quiet=True)
    assert "etcd" in message and "etcd.log" in message
    assert not root.exists()
