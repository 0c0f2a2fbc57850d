"""The six components and where their entry points live.

A component is implemented when its package has a `main` module exposing `main(argv) -> int`: for every
component `COMPONENT.main`, its `core.component.Component` (one entry-point shape and one lifecycle).
`kai run all` starts every implemented one as its own process, as in production where each is its own
Deployment.
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


def entry_module(component: str) -> str:
    return f"operators.{COMPONENTS[component]}.main"


def is_available(component: str) -> bool:
    try:
        return importlib.util.find_spec(entry_module(component)) is not None
    except ModuleNotFoundError:
        return False


def available() -> list[str]:
    return [name for name in COMPONENTS if is_available(name)]


def load(component: str) -> object:
    return importlib.import_module(entry_module(component))
