"""preempt skips a job whose queue has no candidate victim of strictly lower priority (`could_preempt`, over the
least candidate priority per queue). The least must be over every candidate of the queue, whatever their order:
with a higher-priority candidate first, a preemptor between the two priorities still preempts the lower one."""

from __future__ import annotations

from sched_builders import PRIORITY_CLASSES, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import SchedulerConfig

LATER = "2025-01-01T01:00:00Z"


def _objects(first: str, second: str) -> list[dict[str, object]]:
    # Candidates in PodGroup order: "a" then "b". Each fills half the node; the preemptor (75) needs one half.
    classes = {"a": first, "b": second}
    objs: list[dict[str, object]] = [node("n1", gpus=8), queue("q", gpu=(8, -1, 1)), *PRIORITY_CLASSES]
    for name, cls in classes.items():
        objs += [podgroup(name, "q", priority_class=cls, preemptibility="preemptible"),
                 pod(f"{name}-0", name, gpus=4, node_name="n1", phase="Running")]
    objs += [podgroup("p", "q", priority_class="build-preemptible", created=LATER),
             pod("p-0", "p", gpus=4, created=LATER)]
    return objs


def test_the_lowest_candidate_counts_whatever_the_candidates_order() -> None:
    config = SchedulerConfig(actions=("allocate", "preempt"))
    for first, second, victim in (("inference", "train", "b-0"), ("train", "inference", "a-0"),
                                  ("build", "train", "b-0"), ("train", "train", "a-0")):
        d = cycle(_objects(first, second), config)
        assert [e.pod for e in d.evictions] == [victim], (first, second)
    # No candidate below the preemptor's 75: nothing to preempt.
    d = cycle(_objects("inference", "build"), config)
    assert not d.evictions
