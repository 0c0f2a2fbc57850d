"""The scheduler core's integer resource units, and the conversions to and from them.

Every resource amount the core adds, subtracts or compares is a Python `int`, so sums are exact and a
comparison needs no tolerance:

- CPU in millicores (`1` = 1m). Kubernetes itself rounds CPU quantities up to whole millicores.
- Memory in bytes. Kubernetes rounds memory quantities up to whole bytes.
- Other requested resources ("scalars": ephemeral-storage, hugepages, extended resources) in their whole
  units, rounded up (Kubernetes requires extended resources to be integers; storage is in bytes).
- GPUs in micro-GPUs (`GPU` = 1,000,000 = one device). Fine enough that every GPU quantity the system
  accepts is exact: whole devices; `gpu-fraction` (a decimal string in (0, 1]) with up to six decimals, a finer
  one rounded up; per-device portions of a `gpu-memory` pod on a node, which are whole hundredths (KAI's
  rounding); queue quotas and limits with up to six decimals (finer ones rounded to the nearest micro-GPU).
  The one quantity that is not a whole number of micro-GPUs is the queue share of a `gpu-memory` pod not yet
  placed (its MiB over the smallest device's MiB): it is rounded UP to a micro-GPU, the safe side for
  fitting (a queue is never admitted past its limit by a rounding). The per-device fit of a `gpu-memory` pod
  is decided in whole MiB (exact), see `gpu_memory_portion`.

Whole devices on a node (idle, releasing, capacity) are counted as plain device ints; a shared device's used
and releasing portions are micro-GPUs. Conversions back to the units KAI prints (GPUs, cores, GB, the
BindRequest's two-decimal portion, the queue status' MB) happen only at the edges: explanations, `kai simulate`
output, metrics and statuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_CEILING, Decimal

from operators.core.units import GB as GB  # the core's units, re-exported
from operators.core.units import GPU as GPU
from operators.core.units import MB as MB
from operators.core.units import MILLI as MILLI
from operators.core.units import queue_amount as queue_amount

# The one tolerance of the core, for the quantities that are genuinely fractional: a queue's weighted part of a
# fair-share round (in whole units) and the DRF / reclaim-saturation ratios (allocated / share). Two such floats
# closer than this are equal (their float rounding must not decide). No resource amount is ever compared with it.
RATIO_EPS = 1e-9

Vector = tuple[int, int, int]  # (gpu, cpu, memory) in core units
# The axes of a Vector (and of the [gpu, cpu, memory] accumulators). Hot loops unpack a vector into named locals
# (`gpu, cpu, mem = vec`) and write accumulators with literal indexes: a module constant there costs a global
# lookup per access. Everywhere else the index is named.
GPU_AXIS, CPU_AXIS, MEMORY_AXIS = 0, 1, 2
AXES = (GPU_AXIS, CPU_AXIS, MEMORY_AXIS)


def as_vector(values: Sequence[int]) -> Vector:
    """A [gpu, cpu, memory] accumulator (or any 3-sequence) as an immutable Vector."""
    gpu, cpu, mem = values
    return gpu, cpu, mem
WHOLE: Vector = (GPU, 1, 1)  # one whole unit of each resource, in core units


def ceil_scaled(value: Decimal, scale: int) -> int:
    """`value * scale` rounded up to an int (quantity -> core units, the Kubernetes rounding)."""
    return int((value * scale).to_integral_value(rounding=ROUND_CEILING))


def gpu_fraction(portion: float) -> int:
    """A `gpu-fraction` (parsed from its decimal string) in micro-GPUs: exact up to six decimals, else up.

    The float's shortest repr is the decimal the user wrote (up to 15 significant digits), so the decimal is
    rebuilt from it rather than from the binary value (0.1 is 100,000 micro-GPUs, not 100,000.000000000005).
    """
    return ceil_scaled(Decimal(repr(portion)), GPU)


def gpu_memory_portion(memory_mib: int, device_mib: int) -> int:
    """Per-device portion of a `gpu-memory` request on a device of `device_mib` MiB, in micro-GPUs: the MiB
    ratio rounded up to a hundredth of a device (KAI's rounding), computed on integers (exact)."""
    hundredths = -(-100 * memory_mib // device_mib)
    return hundredths * (GPU // 100)


def gpu_memory_share(memory_mib: int, device_mib: int) -> int:
    """The queue share of a `gpu-memory` request not yet placed (MiB over a device's MiB) in micro-GPUs,
    rounded up (the safe side for fitting)."""
    return -(-memory_mib * GPU // device_mib)


def to_gpus(micro: int) -> float:
    """Micro-GPUs -> GPUs (float, correctly rounded: an exact decimal prints as written)."""
    return micro / GPU


def portion_text(micro: int) -> str:
    """A per-device portion as KAI prints it on a BindRequest: two decimals."""
    return f"{micro / GPU:.2f}"
