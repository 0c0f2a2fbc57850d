"""subgroups: the gang rules of PodGroups with SubGroup trees (`tree.py` builds the tree).

The plugin class is `plugin.PLUGIN`.
"""
