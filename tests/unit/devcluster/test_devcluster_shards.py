"""`kai dev up --shards`: names, objects, processes and ports of node-pool shards (no cluster)."""

from __future__ import annotations

import pytest

from operators.cli import parser
from operators.devcluster import shards
from operators.scheduler.shell.main import parser as scheduler_parser


def test_shard_names_parse_and_bad_ones_are_refused() -> None:
    assert shards.parse_shards("a, b") == ["a", "b"]
    for bad in ("default", "A", "a,a", "x_y", ",".join(str(i) for i in range(11))):
        with pytest.raises(ValueError):
            shards.parse_shards(bad)
    args = parser().parse_args(["dev", "up", "--shards", "a,b", "--shard-nodes", "3"])
    assert (args.shards, args.shard_nodes) == (["a", "b"], 3)
    with pytest.raises(SystemExit):
        parser().parse_args(["dev", "up", "--shards", "default"])


def test_a_shard_is_its_object_nodes_and_scheduler_process() -> None:
    assert shards.shard_manifest("a") == {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard",
                                          "metadata": {"name": "a"}, "spec": {"partitionLabelValue": "a"}}
    assert shards.node_names("a", 2) == ["kwok-a-0", "kwok-a-1"]
    ports = shards.shard_ports(23000, 1)
    assert ports == {"metrics": 23910, "probe": 23911}
    argv = shards.scheduler_argv("a", ports)
    args = scheduler_parser().parse_args(argv[argv.index("scheduler") + 1:])
    assert (args.shard_name, args.partition_label_value, args.leader_elect) == ("a", "a", True)
    assert args.lease_name is None  # the scheduler derives kai-scheduler-a from the shard name
    assert args.metrics_address == "127.0.0.1:23910" and args.probe_address == "127.0.0.1:23911"
