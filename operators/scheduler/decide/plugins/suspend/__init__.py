"""suspend (beyond KAI, opt-in per workload or Queue): a suspendable owner chosen as a victim is suspended as a
whole instead of losing its pods one eviction at a time, and resumed whole when its gang fits again.

The plugin class is `plugin.PLUGIN`; the rules (which owners, the resume fit) are in `rules.py`.
"""
