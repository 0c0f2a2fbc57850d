"""gang: the gang rules (readiness, the pods of an attempt, failures, staleness) of flat PodGroups.

The plugin class is `plugin.PLUGIN`. The session asks its rules of whole lists (`ready_jobs` for each action's
candidates, `stale_jobs` at session close), so the rules live here only and cost one call per list, not per job.
"""
