"""Node-pool shards on the local control plane: `kai dev up --shards a,b`.

Each shard gets a SchedulingShard `<name>` (partitionLabelValue `<name>`), `--shard-nodes` fake nodes labelled
`kai.scheduler/node-pool=<name>` (`kwok-<name>-<i>`), and its own scheduler process `scheduler-<name>`
(`kai run scheduler --shard-name <name>`, Lease `kai-scheduler-<name>`), supervised like every other piece.
The default shard's objects (Config `kai-config`, SchedulingShard `default`) come with every cluster.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from operators.core import keys
from operators.devcluster import nodes

SHARD_PORT_OFFSET = 900  # shard i: metrics base+900+10*i, probes +1 (the components use base+800..)
MAX_SHARDS = 10
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


def parse_shards(value: str) -> list[str]:
    """`a,b` -> ["a", "b"]; each name is a SchedulingShard name and the node-pool label value."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    bad = [n for n in names if not _NAME.match(n) or n == "default"]
    if bad:
        raise ValueError(f"invalid shard name(s) {', '.join(bad)}: lowercase letters, digits and '-', "
                         "not 'default' (the default shard always exists)")
    if len(set(names)) != len(names) or len(names) > MAX_SHARDS:
        raise ValueError(f"--shards takes up to {MAX_SHARDS} distinct names, got {value!r}")
    return names


def shard_manifest(name: str, partition: str | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": name},
            "spec": {"partitionLabelValue": name if partition is None else partition, **spec}}


def shard_ports(port_base: int, index: int) -> dict[str, int]:
    return {"metrics": port_base + SHARD_PORT_OFFSET + 10 * index,
            "probe": port_base + SHARD_PORT_OFFSET + 10 * index + 1}


def _free_indexes(state: Any, count: int) -> list[int]:
    """Port slots not taken by shard schedulers already running in this cluster."""
    from operators.devcluster.cluster import _port_free

    base = state.ports["apiserver"] - 443
    taken = set(state.ports.values())
    free = [i for i in range(MAX_SHARDS)
            if not taken & set(shard_ports(base, i).values()) and all(map(_port_free, shard_ports(base, i).values()))]
    if len(free) < count:
        raise ValueError(f"at most {MAX_SHARDS} shard schedulers per cluster")
    return free[:count]


def process_name(shard: str) -> str:
    return f"scheduler-{shard}"


def scheduler_argv(shard: str, ports: dict[str, int]) -> list[str]:
    return [sys.executable, "-m", "operators.cli", "run", "scheduler", f"--shard-name={shard}",
            f"--partition-label-value={shard}", "--leader-elect",
            f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['probe']}"]


def node_names(shard: str, count: int) -> list[str]:
    return [f"kwok-{shard}-{i}" for i in range(count)]


def start_shards(state: Any, names: list[str], *, nodes_per_shard: int, shape: nodes.NodeShape,
                 timeout: float, node_labels: dict[str, str] | None = None) -> None:
    """Create each shard's SchedulingShard and nodes, start its scheduler and wait until it is ready."""
    from operators.devcluster import cluster

    launcher = cluster.Launcher(state)
    manifest = Path(state.dir) / "shards.yaml"
    manifest.write_text(yaml.safe_dump_all([shard_manifest(n) for n in names]))
    kubectl = [state.kubectl, f"--kubeconfig={state.kubeconfig}"]
    cluster._kubectl(kubectl + ["apply", "--server-side", "--force-conflicts", "-f", str(manifest)],
                     "SchedulingShards", launcher)
    if nodes_per_shard:
        missing = asyncio.run(_create_pool_nodes(state.kubeconfig, names, nodes_per_shard, shape, timeout,
                                                 node_labels or {}))
        if missing:
            raise cluster.StartError(f"{len(missing)} shard node(s) did not become Ready (e.g. {missing[0]}); "
                                     f"see the kwok log: {state.logs.get('kwok')}")
    base = state.ports["apiserver"] - 443
    env = {"KUBECONFIG": state.kubeconfig, "PYTHONUNBUFFERED": "1"}
    slots = dict(zip(names, _free_indexes(state, len(names)), strict=True))
    for name, i in slots.items():
        ports = shard_ports(base, i)
        state.ports[f"{process_name(name)}-metrics"] = ports["metrics"]
        state.ports[f"{process_name(name)}-probe"] = ports["probe"]
        launcher.start(process_name(name), scheduler_argv(name, ports), env=env)
    for name in names:
        probe = state.ports[f"{process_name(name)}-probe"]
        launcher.wait_http(process_name(name), f"http://127.0.0.1:{probe}/readyz", timeout)


async def _create_pool_nodes(kubeconfig: str, names: list[str], count: int, shape: nodes.NodeShape,
                             timeout: float, extra_labels: dict[str, str]) -> list[str]:
    from operators.core.kube import api_client

    api = await api_client(kubeconfig)
    async with api:
        created: list[str] = []
        for shard in names:
            pool = node_names(shard, count)
            await nodes.create_nodes(api, pool, shape, labels={keys.NODE_POOL_LABEL: shard, **extra_labels})
            created += pool
        return await nodes.wait_nodes_ready(api, created, timeout)


def stop_shards(state: Any, names: list[str]) -> None:
    """Stop the shard schedulers (their SchedulingShards and nodes are left to the caller)."""
    from operators.devcluster import cluster

    for name in names:
        if process_name(name) in state.pids:
            cluster.stop_component(state, process_name(name))
            state.pids.pop(process_name(name), None)
        for kind in ("metrics", "probe"):
            state.ports.pop(f"{process_name(name)}-{kind}", None)
    state.save()
