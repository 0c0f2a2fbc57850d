"""The operator's Kopf set-up: its handlers, and bookkeeping only under this project's prefix, no finalizer."""

from __future__ import annotations

import kopf

from operators.operator import main


def test_bookkeeping_uses_the_projects_prefix_and_no_finalizer_is_required() -> None:
    settings = main.settings()
    assert settings.persistence.finalizer.startswith("operator.kai.scheduler/")
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == "operator.kai.scheduler"
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.persistence.diffbase_storage.prefix == "operator.kai.scheduler"
    assert settings.peering.standalone and not settings.posting.enabled

    registry = kopf.OperatorRegistry()
    main.register(registry, {})
    handlers = list(registry._changing.get_all_handlers())
    ids = {str(h.id).split("/")[0] for h in handlers}  # Kopf appends the filtered field to the id
    assert {"config-create", "config-update", "config-resume", "shard-create", "shard-update", "shard-resume",
            "shard-delete"} <= ids
    assert not any(h.requires_finalizer for h in handlers), "the delete handler is optional: no finalizer"
    assert {str(h.id) for h in registry._indexing.get_all_handlers()} >= {"configs", "shards", "deployments"}
