"""elastic: job and victim order by elastic state (below, at or above the minimum).

The plugin class is `plugin.PLUGIN`.
"""
