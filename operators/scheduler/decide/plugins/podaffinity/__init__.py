"""podaffinity: preferred inter-pod affinity and anti-affinity as a node score (`score.py`).

The plugin class is `plugin.PLUGIN`.
"""
