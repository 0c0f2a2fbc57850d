"""gang: the gang rules (readiness, the pods of an attempt, failures, staleness) of flat PodGroups.

The plugin class is `plugin.PLUGIN`. Its flat per-podset readiness and staleness rules (`flat_rules`) are also
inlined in the session's two hot loops (`session/candidates.py`, `session/closing.py`), which call the plugin
instead as soon as another gang plugin (subgroups) is in force.
"""
