"""gpujoborder: between victims of equal priority that the job order calls equal, the GPUs they hold decide.

The plugin class is `plugin.PLUGIN`.
"""
