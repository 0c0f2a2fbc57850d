"""predicates: the node predicates of KAI's predicates plugin (resources, pod count, node selector and affinity,
taints, host ports, inter-pod affinity, ConfigMap volumes), evaluated by the placer's indexed search."""

from __future__ import annotations

from operators.scheduler.decide.framework import Plugin


class Predicates(Plugin):
    name = "predicates"
    default_priority = 900
    required = True


PLUGIN = Predicates
