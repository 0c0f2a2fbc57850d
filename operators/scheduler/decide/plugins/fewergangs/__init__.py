"""fewergangs (beyond KAI, opt-in): among victims that every other rule calls equal, the job that moves the fewest
pods goes first, so a single-pod job is taken before a gang is broken.

The plugin class is `plugin.PLUGIN`.
"""
