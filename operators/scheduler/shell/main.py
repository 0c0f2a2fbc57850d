"""The scheduler component: `kai run scheduler`.

A Kopf operator without resource handlers (`component.run_operator`: login, start-up, clean-up) whose runtime is
the informers, an optional Lease and the cycle loop. A standby keeps its informers warm, so a failover starts
scheduling within one lease period.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from operators.core import component
from operators.core.kube import api_client
from operators.core.leader import run_as_leader
from operators.scheduler.decide.config import add_arguments, config_from_args, random_group_id

log = logging.getLogger("scheduler")


def parser() -> argparse.ArgumentParser:
    p = component.base_parser("scheduler")
    add_arguments(p)
    p.add_argument("--shard-name", default="default",
                   help="the SchedulingShard this instance serves (read live); its Lease is kai-scheduler-<name>")
    p.set_defaults(lease_name=None)
    return p


async def serve(args: argparse.Namespace) -> None:
    from dataclasses import replace

    from operators.scheduler.shell.loop import SchedulerLoop
    from operators.scheduler.shell.shard import ShardWatcher

    config = replace(config_from_args(args), scheduler_name=args.scheduler_name, group_id=random_group_id)
    api = await api_client(args.kubeconfig)
    loop = SchedulerLoop(api, config, shard=ShardWatcher(api, args.shard_name, config))
    await component.serve_probes(args, ready=lambda: loop.synced)
    informers = asyncio.create_task(loop.run_informers())
    lag = asyncio.create_task(loop.measure_lag())
    try:
        if args.leader_elect:
            await loop.wait_synced()
            lease = args.lease_name or f"kai-scheduler-{args.shard_name}"
            await run_as_leader(api, name=lease, namespace=args.namespace, work=loop.run,
                                **component.lease_options(args))
        else:
            await loop.run()
    finally:
        informers.cancel()
        lag.cancel()
        await api.close()


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    component.setup_logging(args.log_level, "scheduler", args.log_format)
    return component.run(lambda: component.run_operator("scheduler", args, lambda: serve(args)))
