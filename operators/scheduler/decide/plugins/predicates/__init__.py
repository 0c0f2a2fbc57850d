"""predicates: the node predicates of KAI's predicates plugin.

The plugin class is `plugin.PLUGIN`.
"""
