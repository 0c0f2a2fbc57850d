"""JSON and text logs of the components (`--log-format`), and `kai --version`."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import pytest

from operators import components
from operators.core import logs
from operators.core.workqueue import WorkQueue

ROOT = Path(__file__).resolve().parents[3]


def record(msg: str = "hello", **extra: object) -> logging.LogRecord:
    rec = logging.getLogRecordFactory()("scheduler", logging.INFO, __file__, 1, msg, (), None)
    rec.__dict__.update(extra)
    return rec


def test_json_line_has_component_object_and_reason() -> None:
    fmt = logs.JsonFormatter("scheduler")
    line = json.loads(fmt.format(record("Warning event Unschedulable: no node",
                                        **logs.about("Pod", "team-a", "p-0", "Unschedulable"))))
    assert line["component"] == "scheduler" and line["level"] == "info" and line["logger"] == "scheduler"
    assert line["object"] == {"kind": "Pod", "namespace": "team-a", "name": "p-0"}
    assert line["reason"] == "Unschedulable"
    assert line["msg"] == "Warning event Unschedulable: no node"
    plain = json.loads(fmt.format(record()))
    assert plain["object"] is None and plain["reason"] is None, "the keys are always there"


def test_object_comes_from_kopf_or_from_the_reconcile_in_progress() -> None:
    fmt = logs.JsonFormatter("queue-controller")
    kopf = json.loads(fmt.format(record(k8s_ref={"kind": "Queue", "name": "team-a", "uid": "u"})))
    assert kopf["object"] == {"kind": "Queue", "namespace": "", "name": "team-a"}
    with logs.working_on("PodGroup", ("ns", "pg-1")):
        assert json.loads(fmt.format(record()))["object"] == {"kind": "PodGroup", "namespace": "ns", "name": "pg-1"}
    with logs.working_on("Pod", "ns/p"):
        assert json.loads(fmt.format(record()))["object"]["name"] == "p"
    assert json.loads(fmt.format(record()))["object"] is None


def test_exceptions_are_one_json_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        rec = logging.LogRecord("binder", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = logs.JsonFormatter("binder").format(rec)
    assert "\n" not in text and "RuntimeError: boom" in json.loads(text)["error"]


def test_text_format_names_the_object_and_reason() -> None:
    text = logs.TextFormatter("binder").format(record("bound", **logs.about("Pod", "ns", "p", "Bound")))
    assert text.endswith("bound [Pod ns/p] reason=Bound") and " binder scheduler: " in text


def test_work_queue_logs_carry_the_key_as_object(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[dict[str, str] | None] = []

    async def reconcile(key: object) -> None:
        seen.append(logs._object_of(record()))
        raise ValueError("no")

    async def main() -> None:
        work = WorkQueue(reconcile, workers=1, name="podgroup-controller", kind="PodGroup")
        work.add(("ns", "pg"))
        task = asyncio.create_task(work.run())
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert seen == [{"kind": "PodGroup", "namespace": "ns", "name": "pg"}]
    (failure,) = [r for r in caplog.records if "reconciling" in r.getMessage()]
    assert logs._object_of(failure) == {"kind": "PodGroup", "namespace": "ns", "name": "pg"}


def test_setup_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="text, json"):
        logs.setup("INFO", "x", "yaml")


@pytest.mark.parametrize("name", components.COMPONENTS)
def test_every_component_accepts_log_format(name: str) -> None:
    parser = components.load(name).parser()  # type: ignore[attr-defined]
    assert parser.parse_args(["--log-format", "json"]).log_format == "json"
    assert parser.parse_args([]).log_format == "text"
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-format", "xml"])


def test_kai_version(capsys: pytest.CaptureFixture[str]) -> None:
    from operators.cli import main, version

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"kai {version()}" and version() != "unknown"
