"""The fault-injection suite: `make test` runs its short form; KAI_CHAOS_LONG=1 selects the 2,000-pod form."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: fault injection during a fill (tests/chaos; KAI_CHAOS_LONG=1 for the 2,000-pod form)")
