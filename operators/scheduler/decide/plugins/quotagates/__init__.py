"""quotagates (beyond KAI): lift the quota scheduling gate that admission puts on new pods once their queue's
quota and limits admit their gang, so that only pods quota allows are ever reported Unschedulable.

The plugin class is `plugin.PLUGIN`.
"""
