"""KAI's custom resources: pydantic models (camelCase on the wire; the CRDs are generated from them) and the
typed records the components exchange."""

from operators.core.api.bindrequest import BindRequest, BindRequestRecord, parse_bindrequest
from operators.core.api.podgroup import PodGroup
from operators.core.api.queue import Queue, QueueRecord, QueueStatusRecord, queue_record, queue_status_record
from operators.core.api.schedulingshard import Config, SchedulingShard
from operators.core.api.topology import Topology

__all__ = ["BindRequest", "BindRequestRecord", "Config", "PodGroup", "Queue", "QueueRecord", "QueueStatusRecord",
           "SchedulingShard", "Topology", "parse_bindrequest", "queue_record", "queue_status_record"]
