"""dynamicresources: DRA ResourceClaims allocated from the node's ResourceSlices during placement.

The plugin class is `plugin.PLUGIN`; the allocation of one claim on one node is `allocator.allocate`, the records
and CEL selectors are `decide.devices` (below the session, so the snapshot can count DRA GPUs).
"""
