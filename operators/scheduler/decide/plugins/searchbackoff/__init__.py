"""searchbackoff: reclaim, preempt and consolidation skip a job while its failed-search back-off lasts.

The plugin class is `plugin.PLUGIN`.
"""
