"""taskorder: the order of the pods of a job.

The plugin class is `plugin.PLUGIN`.
"""
