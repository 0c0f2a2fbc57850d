"""gpusharing: fractional-GPU placement (shared GPUs with room first, then a new device).

The plugin class is `plugin.PLUGIN`. The placer evaluates the rule inside its indexed search, below the plugins
in the layers: its score tier is `placement.scoring.SHARED_GPU_SCORE`, the GPU-group choice `placement/gpus.py`.
"""
