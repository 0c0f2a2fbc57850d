from __future__ import annotations

import pytest

from operators import cli, components


def test_unknown_or_missing_component_exits_non_zero() -> None:
    with pytest.raises(SystemExit) as exited:  # argparse refuses the name (a new interpreter cost seconds)
        cli.main(["run", "no-such"])
    assert exited.value.code not in (0, None)


def test_every_component_is_listed_with_its_package() -> None:
    assert set(components.COMPONENTS) == {"pod-grouper", "podgroup-controller", "queue-controller", "binder",
                                          "admission", "scheduler"}
    for name in components.available():
        assert hasattr(components.load(name), "main"), name
