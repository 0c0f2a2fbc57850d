"""backgroundpods: pods labelled `kai.scheduler/background: "true"` are left out of planning and fair share; at
session close each goes back where it still fits, and the rest are evicted for real.

The plugin class is `plugin.PLUGIN`.
"""
