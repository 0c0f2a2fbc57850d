"""priority: jobs of higher PriorityClass value first within a queue.

The plugin class is `plugin.PLUGIN`.
"""
