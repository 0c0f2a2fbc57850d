from __future__ import annotations

import subprocess
import sys

from operators import components


def test_unknown_or_missing_component_exits_non_zero() -> None:
    proc = subprocess.run([sys.executable, "-m", "operators.cli", "run", "no-such"], capture_output=True, text=True)
    assert proc.returncode != 0


def test_every_component_is_listed_with_its_package() -> None:
    assert set(components.COMPONENTS) == {"pod-grouper", "podgroup-controller", "queue-controller", "binder",
                                          "admission", "scheduler"}
    for name in components.available():
        assert hasattr(components.load(name), "main"), name
