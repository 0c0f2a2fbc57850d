"""KAI's map-form `plugins`/`actions` of a SchedulingShard spec, as the chart writes them into the config file."""

from __future__ import annotations

import pytest

from operators.scheduler.decide.config import config_from_mapping


def test_plugin_arguments_set_the_fields_they_name() -> None:
    cfg = config_from_mapping({
        "placementStrategy": {"gpu": "binpack", "cpu": "binpack"},
        "plugins": {
            "proportion": {"arguments": {"kValue": "2.5", "relcaimerSaturationMultiplier": "1.5"}},
            "minruntime": {"enabled": True, "arguments": {"defaultPreemptMinRuntime": "90s",
                                                          "defaultReclaimMinRuntime": "2m",
                                                          "reclaimResolveMethod": "queue"}},
            "nodeplacement": {"arguments": {"gpu": "spread"}},
            "elastic": {"enabled": False},
            "snapshot": {"priority": 1050, "arguments": {"key": "value"}},  # a KAI name without a plugin here
        }})
    assert cfg.k_value == 2.5 and cfg.reclaimer_saturation_multiplier == 1.5
    assert (cfg.default_preempt_min_runtime, cfg.default_reclaim_min_runtime) == (90, 120)
    assert cfg.reclaim_min_runtime_resolve == "queue"
    assert (cfg.gpu_placement, cfg.cpu_placement) == ("spread", "binpack")
    assert "consolidation" not in cfg.effective_actions


def test_action_map_orders_by_priority_and_drops_disabled() -> None:
    cfg = config_from_mapping({"actions": {"consolidation": {"enabled": False}, "preempt": {"priority": 600}}})
    assert cfg.actions == ("preempt", "allocate", "reclaim", "stalegangeviction")


@pytest.mark.parametrize("plugins", [
    {"minruntime": {"arguments": {"reclaimResolveMethod": "nearest"}}},
    {"nodeplacement": {"arguments": {"cpu": "diagonal"}}},
    {"minruntime": {"arguments": {"defaultPreemptMinRuntime": "soon"}}},
])
def test_bad_plugin_arguments_are_refused(plugins: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        config_from_mapping({"plugins": plugins})
