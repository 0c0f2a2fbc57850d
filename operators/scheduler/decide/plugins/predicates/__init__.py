"""predicates: the node predicates of KAI's predicates plugin.

The plugin class is `plugin.PLUGIN`. The predicates are `placement/predicates.py` (static ones as per-signature
node masks) and the resource fit of `placement/search.py`, evaluated by the placer below the plugins in the layers.
"""
