"""Named unit conversions, so that no bare 1000 or 1e6 has to be decoded by the reader.

The Queue API counts CPU in millicores and memory in megabytes (10^6 bytes); Kubernetes quantities are cores and
bytes; GPU memory labels are MiB; the scheduler's integer GPU unit is the micro-GPU.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Final

MILLI: Final = 1000  # millicores per core (Queue `cpu` quotas, the scheduler's CPU unit)
MB: Final = 1_000_000  # bytes per megabyte (Queue `memory` quotas and status)
GB: Final = 1_000_000_000  # bytes per gigabyte (memory as KAI's messages print it)
MIB: Final = 2**20  # bytes per mebibyte (GPU memory: `gpu-memory` annotation, `nvidia.com/gpu.memory` label)
GPU: Final = 1_000_000  # micro-GPUs per device (the scheduler's exact GPU unit)
MS_PER_SECOND: Final = 1000  # latency metrics are in milliseconds
SECONDS_PER_MINUTE: Final = 60
SECONDS_PER_HOUR: Final = 3600


def queue_amount(value: float | int, scale: int) -> int:
    """A Queue's quota/limit number (GPUs, millicores, MB) in core units (scale: micro-GPUs per GPU, 1, bytes
    per MB), rounded to the nearest unit (half to even). -1 (unlimited) is handled by the caller."""
    try:
        dec = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        return int((dec * scale).to_integral_value(rounding=ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError, OverflowError):
        return 0
