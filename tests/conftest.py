"""Fixtures are in the repository's root conftest.py (shared with e2e/); helpers re-exported for imports."""

from tests.support import EXAMPLES, TEST_LABEL, Cluster, labelled, load_yaml

__all__ = ["EXAMPLES", "TEST_LABEL", "Cluster", "labelled", "load_yaml"]
