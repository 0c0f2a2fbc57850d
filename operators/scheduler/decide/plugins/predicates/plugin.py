"""predicates: the node predicates of KAI's predicates plugin (resources, pod count, node selector and affinity,
taints, host ports, inter-pod affinity, ConfigMap volumes). Its one fit function (`fit.py`) answers both "does the
task fit this node" for the placer's indexed search and "why not" for the unschedulable explanations."""

from __future__ import annotations

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.plugins.predicates.fit import fit, histogram


class Predicates(Plugin):
    name = "predicates"
    default_priority = 900
    required = True

    fit = staticmethod(fit)
    histogram = staticmethod(histogram)

    def hooks(self) -> Hooks:
        return Hooks(node_fit=self)


PLUGIN = Predicates
