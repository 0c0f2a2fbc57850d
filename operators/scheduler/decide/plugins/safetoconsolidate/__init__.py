"""safetoconsolidate: consolidation never moves a workload whose PodGroup says `safeToConsolidate: false`.

The plugin class is `plugin.PLUGIN`.
"""
