"""The scheduler component: `kai run scheduler`.

The components' one shape (`core.component.Component`): a Kopf operator without resource handlers whose runtime
serves the probes, builds the loop, runs its informers (a standby keeps them warm, so a failover starts
scheduling within one lease period), waits for them to sync, contends for the shard's Lease
(`kai-scheduler-<shard>` unless --lease-name) and, leading, runs the cycle loop.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from operators.core import component
from operators.scheduler.decide.config import add_arguments, config_from_args, random_group_id
from operators.scheduler.shell.explained import REFRESH
from operators.scheduler.shell.loop import SchedulerLoop
from operators.scheduler.shell.shard import ShardWatcher


def parser() -> argparse.ArgumentParser:
    p = component.base_parser("scheduler")
    add_arguments(p)
    p.add_argument("--shard-name", default="default",
                   help="the SchedulingShard this instance serves (read live); its Lease is kai-scheduler-<name>")
    p.add_argument("--explanation-refresh", type=float, default=REFRESH, metavar="SECONDS",
                   help="a pending pod's or PodGroup's explanation whose numbers alone changed is rewritten at most "
                        "this often (a new reason at once); 0 rewrites on every change, as KAI does")
    p.set_defaults(lease_name=None)
    return p


async def build(args: argparse.Namespace, api: Any, life: component.Lifecycle) -> SchedulerLoop:
    """The loop of this shard: its configuration follows the shard's SchedulingShard from the first cycle on."""
    config = replace(config_from_args(args), scheduler_name=args.scheduler_name, group_id=random_group_id)
    return SchedulerLoop(api, config, shard=ShardWatcher(api, args.shard_name, config),
                         explanation_refresh=args.explanation_refresh)


def lease_name(args: argparse.Namespace) -> str:
    return str(args.lease_name or f"kai-scheduler-{args.shard_name}")


COMPONENT: component.Component[SchedulerLoop] = component.Component(
    "scheduler", parser, build, work=lambda loop: [loop.run()], ready=lambda loop: loop.synced,
    caches=lambda loop: [loop.run_informers(), loop.measure_lag()], synced=lambda loop: loop.wait_synced(),
    lease_name=lease_name)


def main(argv: list[str]) -> int:
    return COMPONENT.main(argv)
