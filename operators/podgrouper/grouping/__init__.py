"""Pure grouping rules of the pod-grouper (contract section 4): which PodGroup a pod belongs to.

No I/O here. The shell reads the owner chain and whatever the rules ask for (`NeedObjects`), then writes
the PodGroup (`merge_with_existing`) and patches the pod (`pod_patch`).
"""

from operators.podgrouper.grouping.grouper import (
    failed_to_find_message,
    group_pod,
    merge_with_existing,
    multiple_owners_message,
    owner_not_found_message,
    parse_kind_defaults,
    pod_patch,
    should_skip,
    to_podgroup,
)
from operators.podgrouper.grouping.model import (
    GrouperConfig,
    GroupingError,
    GroupingResult,
    KindDefaults,
    Lookups,
    NeedObjects,
    ObjectRef,
)
from operators.podgrouper.grouping.registry import register, registered

__all__ = [
    "GrouperConfig",
    "GroupingError",
    "GroupingResult",
    "KindDefaults",
    "Lookups",
    "NeedObjects",
    "ObjectRef",
    "failed_to_find_message",
    "group_pod",
    "merge_with_existing",
    "multiple_owners_message",
    "owner_not_found_message",
    "parse_kind_defaults",
    "pod_patch",
    "register",
    "registered",
    "should_skip",
    "to_podgroup",
]
