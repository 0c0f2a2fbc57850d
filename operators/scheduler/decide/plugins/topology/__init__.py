"""topology: a gang placed inside one domain of a Topology (`domains.py`: the domain arithmetic).

The plugin class is `plugin.PLUGIN`.
"""
