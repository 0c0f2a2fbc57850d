"""nodeplacement: binpack or spread, per resource (gpu, cpu).

The plugin class is `plugin.PLUGIN`. The order is the placer's sorted node index (`placement/scoring.py`, with
the named score tiers `IDLE_FIT_SCORE`, `RESOURCE_TYPE_SCORE`, `BINPACK_SCORE_RANGE`), which the session builds
below the plugins in the layers so the hot search walks it without a call per node.
"""
