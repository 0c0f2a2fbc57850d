"""preemptiondelay: a pending workload makes no evictions until its preemption delay passed (`delay.py`).

The plugin class is `plugin.PLUGIN`.
"""
