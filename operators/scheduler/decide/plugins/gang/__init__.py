"""gang: the gang rules (readiness, the pods of an attempt, failures, staleness) of flat PodGroups.

The plugin class is `plugin.PLUGIN`.
"""
