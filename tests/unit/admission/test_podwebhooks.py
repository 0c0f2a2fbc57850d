"""Which pods the pod webhooks are called for (operators.core.podwebhooks): KAI's condition stays first and
unchanged; the mutating webhook's condition widens with the flags that make it change more pods."""

from __future__ import annotations

import pytest

from operators.admission.main import parser
from operators.core import podwebhooks
from operators.core.podwebhooks import Mutates


@pytest.mark.parametrize(("quota_gates", "args", "scope"), [
    (False, [], Mutates.SHARING),
    (False, ["--log-level=DEBUG", "--gpu-fraction-runtime-class-name=nvidia"], Mutates.SHARING),
    (False, ["--gpu-pod-runtime-class-name=nvidia"], Mutates.GPU),
    (False, ["--gpu-pod-runtime-class-name", "nvidia"], Mutates.GPU),
    (True, [], Mutates.EVERY_POD),
    (False, ["--gpu-pod-runtime-class-name=x", "--quota-gates=true"], Mutates.EVERY_POD),
    (False, ["--quota-gates=false"], Mutates.EVERY_POD),  # any mention widens: a wider condition only costs calls
])
def test_the_mutating_scope_follows_the_flags(quota_gates: bool, args: list[str], scope: Mutates) -> None:
    assert podwebhooks.mutates(quota_gates=quota_gates, args=args) is scope


def test_kais_condition_comes_first_and_every_pod_drops_ours() -> None:
    kai = podwebhooks.scheduler_name_match("kai-scheduler")
    assert kai == {"name": "scheduler-name-match", "expression": "object.spec.schedulerName == 'kai-scheduler'"}
    for scope in Mutates:
        assert podwebhooks.mutating_conditions("kai-scheduler", scope)[0] == kai
    assert podwebhooks.mutating_conditions("kai-scheduler", Mutates.EVERY_POD) == [kai]
    assert podwebhooks.validating_conditions("kai-scheduler", gpu_sharing=False) == [kai, podwebhooks.MAY_BE_DENIED]
    assert podwebhooks.validating_conditions("kai-scheduler", gpu_sharing=True) == [
        kai, podwebhooks.MAY_BE_DENIED, podwebhooks.PROVEN_VALID_CREATE]


@pytest.mark.parametrize(("enabled", "extra_args", "sure"), [
    (True, [], True),
    (False, [], False),
    (True, ["--log-level=DEBUG"], True),
    (True, ["--gpu-sharing-enabled=false"], False),
    (True, ["--gpu-sharing-enabled", "false"], False),  # the value may be the next argument
    (True, ["--gpu-sharing-enabled=true"], False),  # any mention: only sure from the setting itself
])
def test_sharing_is_sure_only_from_the_setting_without_a_mention_in_extra_arguments(
        enabled: bool, extra_args: list[str], sure: bool) -> None:
    assert podwebhooks.shares_gpus(enabled=enabled, extra_args=extra_args) is sure


def test_the_admission_takes_no_abbreviated_flags() -> None:
    # The registrations recognise the widening flags by their whole names only.
    with pytest.raises(SystemExit):
        parser().parse_args(["--quota"])
    assert parser().parse_args(["--quota-gates=true"]).quota_gates
