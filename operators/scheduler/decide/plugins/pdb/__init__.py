"""pdb: PodDisruptionBudget-aware victim choice, and evictions the API server refused (`budget.py`).

The plugin class is `plugin.PLUGIN`.
"""
