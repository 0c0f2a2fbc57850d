"""Pydantic models of KAI's custom resources, camelCase on the wire."""

from operators.core.api.bindrequest import BindRequest
from operators.core.api.podgroup import PodGroup
from operators.core.api.queue import Queue
from operators.core.api.schedulingshard import Config, SchedulingShard
from operators.core.api.topology import Topology

__all__ = ["BindRequest", "Config", "PodGroup", "Queue", "SchedulingShard", "Topology"]
