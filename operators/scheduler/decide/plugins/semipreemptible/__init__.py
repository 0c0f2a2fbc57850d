"""semipreemptible: `preemptibility: semi-preemptible` PodGroups (KAI v0.18, alpha) are non-preemptible and in
quota up to their core, preemptible and over quota above it.

The plugin class is `plugin.PLUGIN`.
"""
