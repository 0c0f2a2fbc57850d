"""preemptionpolicy: a workload whose PriorityClass (or pod) says `preemptionPolicy: Never` evicts no one.

The plugin class is `plugin.PLUGIN`.
"""
