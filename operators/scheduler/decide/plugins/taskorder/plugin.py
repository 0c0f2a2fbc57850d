"""taskorder: the pods of a job in order: Ray head / Kubeflow master first, then the task-priority label
(labelled first, higher first), then age and UID."""

from __future__ import annotations

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.ordering import task_order_key


class TaskOrder(Plugin):
    name = "taskorder"
    default_priority = 450
    required = True

    task_order_key = staticmethod(task_order_key)  # the plain function: called for every pod at session open

    def hooks(self) -> Hooks:
        return Hooks(task_order=self)


PLUGIN = TaskOrder
