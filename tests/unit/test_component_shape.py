"""One entry-point shape: each component's main module declares a `core.component.Component` under its own name,
and its `main` is that Component's."""

from __future__ import annotations

import argparse

import pytest

from operators import components
from operators.core.component import Component

ADOPTED = list(components.COMPONENTS)


@pytest.mark.parametrize("name", ADOPTED)
def test_the_component_declares_its_shape(name: str) -> None:
    module = components.load(name)
    spec = module.COMPONENT  # type: ignore[attr-defined]
    assert isinstance(spec, Component) and spec.name == name
    args = spec.parser().parse_args([])
    assert isinstance(args, argparse.Namespace) and args.component == name


def test_only_the_admission_webhook_is_active_active() -> None:
    for name in ADOPTED:
        spec = components.load(name).COMPONENT  # type: ignore[attr-defined]
        args = spec.parser().parse_args(["--leader-elect"])
        assert spec.elected(args) is (name != "admission"), name
