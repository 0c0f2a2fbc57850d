"""proportion: hierarchical fair share (DRF), the queue order and the queue capacity checks.

The plugin class is `plugin.PLUGIN`.
"""
