"""Shared pieces of the API models: camelCase on the wire, extra fields kept, quantities as strings."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """camelCase on the wire; unknown fields survive a round trip (newer KAI versions may add some)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# A Kubernetes quantity (`2`, `500m`, `1Gi`): an integer or a string, as core/v1 ResourceList values.
Quantity = Annotated[
    int | float | str,
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}),
]
ResourceList = dict[str, Quantity]

# Free-form objects defined by other APIs (e.g. resource.k8s.io AllocationResult).
Opaque = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


class ObjectMeta(WireModel):
    """The subset of metadata the models care about; the rest is kept as extra fields."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[dict[str, Any]] | None = None


Int32 = Annotated[int, Field(json_schema_extra={"format": "int32"})]
