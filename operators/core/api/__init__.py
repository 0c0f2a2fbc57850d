"""Pydantic models of KAI's custom resources, camelCase on the wire."""

from operators.core.api.bindrequest import BindRequest
from operators.core.api.podgroup import PodGroup
from operators.core.api.queue import Queue

__all__ = ["BindRequest", "PodGroup", "Queue"]
