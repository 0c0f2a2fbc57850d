"""nodeplacement: binpack or spread, per resource (gpu, cpu).

The plugin class is `plugin.PLUGIN`.
"""
