"""predicates: the node predicates of KAI's predicates plugin.

The plugin class is `plugin.PLUGIN`; the node fit is `fit.py`. The static predicates and the inter-pod affinity
index are `placement/predicates.py` (static ones as per-signature node masks, which the session's layers below
the plugins build).
"""
