"""gpusharing: fractional-GPU placement (KAI's gpusharingorder score and GPU groups): a fractional pod prefers a
shared GPU that already has room (binpack), then a new device; built into the placer's node index."""

from __future__ import annotations

from operators.scheduler.decide.framework import Plugin


class GpuSharing(Plugin):
    name = "gpusharing"
    default_priority = 400
    required = True


PLUGIN = GpuSharing
