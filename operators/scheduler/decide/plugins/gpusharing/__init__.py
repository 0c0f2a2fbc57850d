"""gpusharing: fractional-GPU placement (shared GPUs with room first, then a new device).

The plugin class is `plugin.PLUGIN`.
"""
