"""The Default grouper (unknown kinds) and bare pods, including Spark's driver/executor naming."""

from __future__ import annotations

from operators.podgrouper.grouping.common import Context, base_metadata, labels_of
from operators.podgrouper.grouping.model import Metadata, Obj
from operators.podgrouper.grouping.registry import register, set_default

SPARK_APP_NAME = "spark-app-name"
SPARK_APP_SELECTOR = "spark-app-selector"


def default_rule(ctx: Context, top: Obj) -> Metadata:
    # Only when the Default grouper is itself selected do all owners vote on priority.
    return base_metadata(ctx, top, priority_owners=ctx.chain or (ctx.pod,))


set_default("default", default_rule)


@register("", "Pod", name="pod")
def pod_rule(ctx: Context, top: Obj) -> Metadata:
    metadata = base_metadata(ctx, top, priority_owners=(ctx.pod,))
    labels = labels_of(ctx.pod)
    # Spark's driver and executors share the app selector: one PodGroup for the whole application.
    if SPARK_APP_NAME in labels and SPARK_APP_SELECTOR in labels:
        metadata.name = labels[SPARK_APP_SELECTOR]
    return metadata
