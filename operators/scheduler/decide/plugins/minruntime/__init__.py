"""minruntime: a job younger than its queue's minimum runtime is not a victim.

The plugin class is `plugin.PLUGIN`.
"""
