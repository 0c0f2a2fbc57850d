"""The six components and where their entry points live.

A component is implemented when its package has a `main` module exposing `main(argv) -> int`: for every
component `COMPONENT.main`, its `core.component.Component` (one entry-point shape and one lifecycle).
`kai run all` starts every implemented one as its own process, as in production where each is its own
Deployment. `kai run operator` is the kai-operator, which deploys the six from the Config and SchedulingShards.
"""

from __future__ import annotations

import importlib
import importlib.util

COMPONENTS = {
    # name in `kai run` / the helm chart -> package under operators/
    "pod-grouper": "podgrouper",
    "podgroup-controller": "podgroupcontroller",
    "queue-controller": "queuecontroller",
    "binder": "binder",
    "admission": "admission",
    "scheduler": "scheduler",
}


# Run on its own, never by `kai run all` or `kai dev up`: the operator deploys the six as Deployments, which
# host processes would duplicate.
OPERATOR = {"operator": "operator"}
RUNNABLE = {**COMPONENTS, **OPERATOR}


def entry_module(component: str) -> str:
    return f"operators.{RUNNABLE[component]}.main"


def is_available(component: str) -> bool:
    try:
        return importlib.util.find_spec(entry_module(component)) is not None
    except ModuleNotFoundError:
        return False


def available() -> list[str]:
    return [name for name in COMPONENTS if is_available(name)]


def load(component: str) -> object:
    return importlib.import_module(entry_module(component))
