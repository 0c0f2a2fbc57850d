"""Property tests: no node is over-committed and a gang is bound whole or not at all."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sched_builders import cycle, node, pod, podgroup, queue

jobs_strategy = st.lists(st.tuples(
    st.integers(1, 4),  # pods
    st.sampled_from([0, 1, 2, 4]),  # whole GPUs per pod
    st.sampled_from([None, "0.5", "0.3"]),  # fraction
    st.integers(1, 8),  # cpu cores
), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(n_nodes=st.integers(1, 4), jobs=jobs_strategy, spread=st.booleans())
def test_no_overcommit_and_whole_gangs(n_nodes: int, jobs: list[tuple[int, int, str | None, int]],
                                       spread: bool) -> None:
    from operators.scheduler.decide.config import SchedulerConfig
    objs: list[dict[str, Any]] = [node(f"n{i}", gpus=4, cpu="16") for i in range(n_nodes)] + [queue("q")]
    requests: dict[str, tuple[int, float, int]] = {}
    for j, (size, gpus, fraction, cpu) in enumerate(jobs):
        objs.append(podgroup(f"j{j}", min_member=size, created=f"2025-01-01T00:00:{j:02d}Z"))
        for k in range(size):
            name = f"j{j}-{k}"
            objs.append(pod(name, f"j{j}", gpus=0 if fraction else gpus, fraction=fraction, cpu=str(cpu)))
            requests[name] = (0 if fraction else gpus, float(fraction or 0), cpu)
    d = cycle(objs, SchedulerConfig(gpu_placement="spread" if spread else "binpack"))
    used_gpu = {f"n{i}": 0.0 for i in range(n_nodes)}
    used_cpu = {f"n{i}": 0 for i in range(n_nodes)}
    group_use: dict[str, float] = {}
    for b in d.binds:
        whole, frac, cpu = requests[b.pod]
        used_cpu[b.node] += cpu
        used_gpu[b.node] += whole
        for g in b.gpu_groups:
            if g not in group_use:
                used_gpu[b.node] += 1
            group_use[g] = group_use.get(g, 0.0) + frac
    assert all(v <= 4 for v in used_gpu.values())
    assert all(v <= 16 for v in used_cpu.values())
    assert all(v <= 1.0 + 1e-9 for v in group_use.values())
    by_job: dict[str, int] = {}
    for b in d.binds:
        by_job[b.pod_group] = by_job.get(b.pod_group, 0) + 1
    for j, (size, *_rest) in enumerate(jobs):
        assert by_job.get(f"j{j}", 0) in (0, size)
