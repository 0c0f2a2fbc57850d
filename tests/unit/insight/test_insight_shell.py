"""The CLI shell's behaviour that needs no cluster: exit codes for bad input, kubectl's namespace default."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from operators import cli
from operators.insight.shell import current_namespace


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    """`kai ARGS` in this process (a new interpreter per call cost seconds): its exit code and output. An
    exception escaping `main` (what would print a traceback) fails the test."""
    monkeypatch.setenv("KUBECONFIG", "/nonexistent")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    def call(*args: str) -> Ran:
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)
    return call


def test_unknown_kind_and_bad_flags_exit_2_with_a_message(run: Callable[..., Ran]) -> None:
    proc = run("why", "cronjob", "x")
    assert proc.returncode == 2 and "unknown kind 'cronjob'" in proc.stderr
    assert run("queues", "-o", "table").returncode == 2
    assert run("what-if").returncode == 2  # -f is required


def test_unreachable_cluster_is_an_error_not_a_traceback(run: Callable[..., Ran]) -> None:
    proc = run("top")
    assert proc.returncode == 2 and "kai top: error" in proc.stderr and "Traceback" not in proc.stderr


def test_namespace_defaults_to_the_kubeconfig_context(tmp_path: Path) -> None:
    cfg = {"current-context": "b", "contexts": [{"name": "a", "context": {"namespace": "ns-a"}},
                                                 {"name": "b", "context": {"namespace": "ns-b"}}]}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(cfg))
    assert current_namespace(str(path)) == "ns-b"
    cfg["current-context"] = "a"
    cfg["contexts"][0]["context"] = {}
    path.write_text(yaml.safe_dump(cfg))
    assert current_namespace(str(path)) == "default"


def test_the_commands_are_listed_in_kai_help(run: Callable[..., Ran]) -> None:
    out = run("--help").stdout
    for name in ("why", "what-if", "queues", "top"):
        assert name in out
