"""kai-operator: Config `kai-config` and SchedulingShards -> the suite, a Kopf operator.

Resource handlers (create/update/resume) on Config and SchedulingShard reconcile level-triggered: each run
renders every object the object owns from the current Config and shards (`render`, pure) and applies it with
server-side apply (field manager `kai-operator`; an unchanged object is not written, so applying is idempotent),
owner-referenced so that garbage collection removes what a deleted object owned. Failures of the API server
raise `kopf.TemporaryError` (Kopf retries with backoff); an invalid spec raises `kopf.PermanentError` after a
Warning event and the condition `SpecValid=False` naming the field, and changes nothing that runs.

Kopf indexes hold the Configs, shards and owned Deployments (a few objects each); an event handler on the owned
Deployments keeps `Deployed`/`Available` true and re-applies a child deleted by hand. Status is written only
when a condition changed, and status writes trigger no handler (Kopf ignores status), so the operator's own
writes never loop. Kopf keeps its diff base and retry progress in annotations with this project's prefix
`operator.kai.scheduler/`, and adds no finalizer (the delete handler is optional; ownerReferences clean up).
Leader election: the start-up handler waits for the Lease (with --leader-elect), so Kopf opens its watches, one
per resource, only on the leader; losing the Lease exits the process.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kopf

from operators.core import component
from operators.core.api.schedulingshard import CONFIG_NAME, GROUP, VERSION
from operators.core.conditions import merge_conditions
from operators.core.events import EventRecorder, ObjectRef
from operators.core.kube import APPLY_PATCH, MERGE_PATCH, RawError, api_client, is_not_found, raw, set_user_agent
from operators.core.metrics import Counter
from operators.core.times import rfc3339
from operators.operator import render, status, unhonoured, validate
from operators.operator.components import BY_KEY, CERT_SECRETS, COMPONENTS

log = logging.getLogger("operator")
FIELD_MANAGER = "kai-operator"
PREFIX = "operator.kai.scheduler"
RETRY_DELAY = 5.0
MANAGED = {"app.kubernetes.io/managed-by": render.MANAGED_BY}
WRITES = Counter("kai_operator_writes_total", "Writes of the operator to the API server", ["kind", "verb"])

Body = Mapping[str, Any]
# The conditions to write, computed when the write is made: from the indexes as they are then, not as they were
# when the handler started (see `Operator.report`).
Wanted = Callable[[], Sequence[Mapping[str, Any]]]
REPORT_ATTEMPTS = 5


def _path(obj: Mapping[str, Any]) -> str:
    """The API path of a rendered object."""
    api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = kind.lower() + "s"  # every kind rendered here (Deployment, Service, ..., WebhookConfiguration)
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{base}{ns}/{plural}/{meta['name']}"


def _owner(body: Body) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": body["kind"], "name": body["metadata"]["name"],
            "uid": body["metadata"]["uid"], "controller": True}


class Operator:
    """The operator's client side: apply, delete, status, events."""

    def __init__(self, api: Any, version: str) -> None:
        self.api = api
        self.version = version
        self.events = EventRecorder(api, FIELD_MANAGER)
        self._reporting: dict[str, asyncio.Lock] = {}

    async def apply(self, obj: dict[str, Any], owner: Body) -> None:
        obj = {**obj, "metadata": {**obj["metadata"], "ownerReferences": [_owner(owner)]}}
        try:
            await raw(self.api, "PATCH", _path(obj), body=obj, content_type=APPLY_PATCH,
                      query={"fieldManager": FIELD_MANAGER, "force": "true"})
        except RawError as exc:
            raise kopf.TemporaryError(f"{obj['kind']} {obj['metadata']['name']} not applied: {exc.status} "
                                      f"{str(exc.body)[:300]}", delay=RETRY_DELAY) from exc
        WRITES.labels(obj["kind"], "apply").inc()

    async def delete(self, obj: Mapping[str, Any]) -> None:
        try:
            await raw(self.api, "DELETE", _path(obj))
            WRITES.labels(obj["kind"], "delete").inc()
        except RawError as exc:
            if not is_not_found(exc):
                raise kopf.TemporaryError(f"{obj['kind']} {obj['metadata']['name']} not deleted: {exc.status}",
                                          delay=RETRY_DELAY) from exc

    async def exists(self, obj: Mapping[str, Any]) -> bool:
        try:
            await raw(self.api, "GET", _path(obj))
            return True
        except RawError as exc:
            if is_not_found(exc):
                return False
            raise kopf.TemporaryError(f"{obj['kind']} {obj['metadata']['name']}: {exc.status}",
                                      delay=RETRY_DELAY) from exc

    async def ca_bundles(self, s: render.Settings) -> dict[str, str]:
        """The CA bundle of each webhook server, from its TLS Secret (the chart's, or cert-manager's)."""
        out = {}
        for key, default in CERT_SECRETS.items():
            name = s.comp(BY_KEY[key], "certSecretName", default=default)
            try:
                secret = await raw(self.api, "GET", f"/api/v1/namespaces/{s.namespace}/secrets/{name}")
            except RawError as exc:
                if not is_not_found(exc):
                    log.warning("Secret %s/%s: %s", s.namespace, name, exc.status)
                continue
            ca = (secret.get("data") or {}).get("ca.crt")
            if ca:
                out[key] = ca
        return out

    async def report(self, body: Body, wanted: Wanted) -> None:
        """Write the operator's conditions when one changed (a merge patch of the list, other writers' kept).

        Handlers of different Deployments run concurrently, each reading the Deployments index. A write computed
        from the index before another handler's newer write landed would put a stale `Available=False` back with
        no later event to correct it. So the writes to one object are serialised, and `wanted` is computed after
        each read of the object: the last write always reflects the index as it was last seen."""
        plural = "configs" if body["kind"] == "Config" else "schedulingshards"
        path = f"/apis/{GROUP}/{VERSION}/{plural}/{body['metadata']['name']}"
        async with self._reporting.setdefault(path, asyncio.Lock()):
            for _attempt in range(REPORT_ATTEMPTS):
                try:
                    # The conditions as stored now (the scheduler writes its own there), and a write that fails
                    # (409) if they changed meanwhile, so no other writer's condition is lost.
                    fresh = await raw(self.api, "GET", path)
                    existing = (fresh.get("status") or {}).get("conditions") or []
                    merged = merge_conditions(existing, wanted(), rfc3339())
                    if merged is None:
                        return
                    patch = {"metadata": {"resourceVersion": fresh["metadata"]["resourceVersion"]},
                             "status": {"conditions": merged}}
                    await raw(self.api, "PATCH", f"{path}/status", body=patch, content_type=MERGE_PATCH,
                              query={"fieldManager": FIELD_MANAGER})
                    WRITES.labels(body["kind"], "status").inc()
                    return
                except RawError as exc:
                    if exc.status == 409:
                        continue
                    if not is_not_found(exc):
                        log.warning("status of %s %s not written: %s", body["kind"], body["metadata"]["name"],
                                    exc.status)
                    return
            log.warning("status of %s %s not written: changed by another writer %d times in a row", body["kind"],
                        body["metadata"]["name"], REPORT_ATTEMPTS)

    async def withdraw(self) -> None:
        """On a leader's way out: remove its conditions from the Config and every shard, so that no stale
        `Reconciling` says an operator still reconciles them (the scheduler instance then reports there again).
        A successor writes them back when it resumes."""
        for plural in ("configs", "schedulingshards"):
            try:
                listed = await raw(self.api, "GET", f"/apis/{GROUP}/{VERSION}/{plural}")
            except RawError as exc:
                log.warning("%s not listed on the way out: %s", plural, exc.status)
                continue
            for obj in listed.get("items") or []:
                await self._strip(plural, obj, status.owned_types(plural == "configs"))

    async def _strip(self, plural: str, obj: Body, types: frozenset[str]) -> None:
        conditions = (obj.get("status") or {}).get("conditions") or []
        kept = [c for c in conditions if c.get("type") not in types]
        if len(kept) == len(conditions):
            return
        patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": {"conditions": kept}}
        try:
            await raw(self.api, "PATCH", f"/apis/{GROUP}/{VERSION}/{plural}/{obj['metadata']['name']}/status",
                      body=patch, content_type=MERGE_PATCH, query={"fieldManager": FIELD_MANAGER})
            WRITES.labels(obj["kind"], "status").inc()
        except RawError as exc:  # 409: changed meanwhile (a successor already writes); 404: gone
            log.info("conditions of %s %s left: %s", obj["kind"], obj["metadata"]["name"], exc.status)

    async def refuse(self, body: Body, problems: list[validate.Problem]) -> None:
        """Say why (event + condition) and leave everything that runs as it is."""
        message = "; ".join(str(p) for p in problems)
        await self.events.emit(ObjectRef.of(dict(body)), "Warning", "InvalidSpec", message)
        generation = int(body["metadata"].get("generation") or 0)
        refused = status.conditions(generation, problems, applied=False, state=status.Rollout(0, 0, 0))
        await self.report(body, lambda: refused)
        raise kopf.PermanentError(f"{body['kind']} {body['metadata']['name']} refused: {message}")


def _settings(body: Body, version: str) -> render.Settings:
    labels = (body.get("metadata") or {}).get("labels") or {}
    return render.Settings(dict(body.get("spec") or {}), instance=labels.get("app.kubernetes.io/instance",
                                                                              "kai-scheduler"),
                           version=labels.get("app.kubernetes.io/version", version))


def _is_kai_config(name: str, **_: Any) -> bool:
    """Only the Config named kai-config is reconciled, as in KAI. (A filter: `field=` on a change handler would
    also narrow the change it reacts to to that field.)"""
    return name == CONFIG_NAME


def _one(index: kopf.Index[str, Any], key: str) -> Any:
    for value in index.get(key, []):
        return value
    return None


def _deployments(index: kopf.Index[str, Any], names: list[str]) -> list[dict[str, Any]]:
    return [d for name in names if (d := _one(index, name)) is not None]


def register(registry: kopf.OperatorRegistry, op_ref: dict[str, Operator]) -> None:
    """The operator's handlers, in `registry`."""

    def op() -> Operator:
        return op_ref["op"]

    # --- indexes: the few objects every reconcile reads ------------------------------------------
    # The ids are the names handlers receive the indexes under (nested functions would get qualified names).
    @kopf.index(GROUP, VERSION, "configs", registry=registry, field="metadata.name", value=CONFIG_NAME,
                id="configs")
    def configs(body: Body, **_: Any) -> dict[str, Any]:
        return {CONFIG_NAME: {"metadata": dict(body["metadata"]), "spec": dict(body.get("spec") or {}),
                              "kind": "Config", "status": dict(body.get("status") or {})}}

    @kopf.index(GROUP, VERSION, "schedulingshards", registry=registry, id="shards")
    def shards(name: str, body: Body, **_: Any) -> dict[str, Any]:
        return {name: {"metadata": dict(body["metadata"]), "spec": dict(body.get("spec") or {}),
                       "kind": "SchedulingShard", "status": dict(body.get("status") or {})}}

    @kopf.index("apps", "v1", "deployments", registry=registry, labels=MANAGED, id="deployments")
    def deployments(name: str, body: Body, **_: Any) -> dict[str, Any]:
        return {name: {"metadata": {k: body["metadata"].get(k) for k in ("name", "generation", "ownerReferences")},
                       "spec": {"replicas": (body.get("spec") or {}).get("replicas", 1)},
                       "status": dict(body.get("status") or {})}}

    # --- the Config: the components ------------------------------------------------------------------
    async def reconcile_config(body: Body, shards: kopf.Index[str, Any],
                               deployments: kopf.Index[str, Any]) -> None:
        problems = validate.config_problems(body.get("spec") or {})
        if problems:
            await op().refuse(body, problems)
        s = _settings(body, op().version)
        default = _one(shards, render.DEFAULT_SHARD)
        objects = render.config_objects(s, (default or {}).get("spec"))
        for obj in objects:
            await op().apply(obj, body)
        for obj in render.webhook_configurations(s, await op().ca_bundles(s)):
            await op().apply(obj, body)
        for c in COMPONENTS:  # a component switched off: its objects go
            if not s.enabled(c):
                for obj in render.component_objects(s, c):
                    await op().delete(obj)
        for obj in render.unwanted_budgets(s):  # down to one replica, or the budget switched off
            if await op().exists(obj):
                await op().delete(obj)
        await report_config(body, s, deployments)

    async def report_config(body: Body, s: render.Settings, deployments: kopf.Index[str, Any]) -> None:
        names = [c.name for c in COMPONENTS if s.enabled(c)]
        generation = int(body["metadata"].get("generation") or 0)
        fields = unhonoured.config_fields(body.get("spec") or {})
        await op().report(body, lambda: status.conditions(
            generation, [], applied=True, state=status.rollout(_deployments(deployments, names), names),
            unhonoured=fields))

    @kopf.on.resume(GROUP, VERSION, "configs", registry=registry, when=_is_kai_config, id="config-resume")
    @kopf.on.create(GROUP, VERSION, "configs", registry=registry, when=_is_kai_config, id="config-create")
    # Handlers take the keyword arguments they use: Kopf's callback protocols list all of them (mypy).
    @kopf.on.update(GROUP, VERSION, "configs", registry=registry, when=_is_kai_config,  # type: ignore[arg-type]
                    id="config-update")
    async def config_changed(body: Body, shards: kopf.Index[str, Any], deployments: kopf.Index[str, Any],
                             **_: Any) -> None:
        await reconcile_config(body, shards, deployments)
        config = _settings(body, op().version)
        for name in list(shards):  # every shard's scheduler takes the Config's settings too
            shard = _one(shards, name)
            if shard is not None and name != render.DEFAULT_SHARD:
                await reconcile_shard(shard, config, shards, deployments, raise_refusal=False)

    # --- SchedulingShards: one scheduler each ------------------------------------------------------
    def shard_problems(body: Body, shards: kopf.Index[str, Any]) -> list[validate.Problem]:
        others = [validate.ShardRef(n, str((o["spec"] or {}).get("partitionLabelValue") or ""),
                                    str(o["metadata"].get("creationTimestamp") or ""))
                  for n in list(shards) if (o := _one(shards, n)) is not None]
        meta = body["metadata"]
        return validate.shard_problems(meta["name"], body.get("spec") or {}, str(meta.get("creationTimestamp") or ""),
                                       others)

    async def reconcile_shard(body: Body, config: render.Settings, shards: kopf.Index[str, Any],
                              deployments: kopf.Index[str, Any], *, raise_refusal: bool = True) -> None:
        problems = shard_problems(body, shards)
        if problems:
            try:
                await op().refuse(body, problems)
            except kopf.PermanentError:
                if raise_refusal:
                    raise
            return
        name = body["metadata"]["name"]
        for obj in render.shard_objects(config, name, body.get("spec") or {}):
            await op().apply(obj, body)
        await report_shard(body, config, deployments)

    async def report_shard(body: Body, config: render.Settings, deployments: kopf.Index[str, Any]) -> None:
        name = body["metadata"]["name"]
        scheduler = BY_KEY["scheduler"]
        wanted = [] if not config.enabled(scheduler) else [
            scheduler.name if name == render.DEFAULT_SHARD else render.shard_name(name)]
        generation = int(body["metadata"].get("generation") or 0)
        await op().report(body, lambda: status.conditions(
            generation, [], applied=True, state=status.rollout(_deployments(deployments, wanted), wanted)))

    def config_settings(configs: kopf.Index[str, Any]) -> render.Settings:
        config = _one(configs, CONFIG_NAME)
        if config is None:
            raise kopf.TemporaryError(f"waiting for the Config {CONFIG_NAME}", delay=10)
        return _settings(config, op().version)

    @kopf.on.resume(GROUP, VERSION, "schedulingshards", registry=registry, id="shard-resume")
    @kopf.on.create(GROUP, VERSION, "schedulingshards", registry=registry, id="shard-create")
    @kopf.on.update(GROUP, VERSION, "schedulingshards", registry=registry, id="shard-update")  # type: ignore[arg-type]
    async def shard_changed(name: str, body: Body, configs: kopf.Index[str, Any], shards: kopf.Index[str, Any],
                            deployments: kopf.Index[str, Any], **_: Any) -> None:
        config = config_settings(configs)
        if name == render.DEFAULT_SHARD:
            problems = shard_problems(body, shards)
            if problems:
                await op().refuse(body, problems)
            # Its scheduler is the Config's kai-scheduler-default, configured from this spec (config.yaml).
            await reconcile_config(_one(configs, CONFIG_NAME), shards, deployments)
            await report_shard(body, config, deployments)
            return
        await reconcile_shard(body, config, shards, deployments)

    @kopf.on.delete(GROUP, VERSION, "schedulingshards", registry=registry, optional=True, id="shard-delete")  # type: ignore[arg-type]
    async def shard_deleted(name: str, spec: Body, configs: kopf.Index[str, Any], shards: kopf.Index[str, Any],
                            deployments: kopf.Index[str, Any], **_: Any) -> None:
        """Its scheduler goes now (garbage collection would too); a shard refused for serving the same node pool
        may now run."""
        config = config_settings(configs)
        for obj in render.shard_objects(config, name, spec):
            await op().delete(obj)
        partition = str(spec.get("partitionLabelValue") or "")
        for other in list(shards):
            body = _one(shards, other)
            if other != name and body is not None and \
                    str((body["spec"] or {}).get("partitionLabelValue") or "") == partition:
                await reconcile_shard(body, config, shards, deployments, raise_refusal=False)

    # --- owned Deployments: Available, and a child deleted by hand comes back --------------------------
    @kopf.on.event("apps", "v1", "deployments", registry=registry, labels=MANAGED, id="owned-deployments")  # type: ignore[arg-type]
    async def child_changed(event: Body, body: Body, configs: kopf.Index[str, Any],
                            shards: kopf.Index[str, Any], deployments: kopf.Index[str, Any], **_: Any) -> None:
        owners = [r for r in body["metadata"].get("ownerReferences") or [] if r.get("apiVersion") ==
                  f"{GROUP}/{VERSION}"]
        if not owners:
            return
        ref = owners[0]
        deleted = event.get("type") == "DELETED"
        config_body = _one(configs, CONFIG_NAME)
        if config_body is None:
            return
        config = _settings(config_body, op().version)
        try:
            if ref["kind"] == "Config":
                if deleted:
                    await reconcile_config(config_body, shards, deployments)
                else:
                    await report_config(config_body, config, deployments)
                    default = _one(shards, render.DEFAULT_SHARD)
                    if default is not None:
                        await report_shard(default, config, deployments)
            elif (shard := _one(shards, ref["name"])) is not None:
                if deleted:
                    await reconcile_shard(shard, config, shards, deployments, raise_refusal=False)
                else:
                    await report_shard(shard, config, deployments)
        except (kopf.TemporaryError, kopf.PermanentError) as exc:
            log.warning("after a change of Deployment %s: %s", body["metadata"]["name"], exc)


def settings() -> kopf.OperatorSettings:
    """The components' Kopf settings, plus this operator's own bookkeeping keys and a server-side filter."""
    s = component.kopf_settings("operator")
    s.persistence.finalizer = f"{PREFIX}/finalizer"
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX,
                                                                     key="last-handled-configuration")
    s.watching.label_selectors["apps", "deployments"] = \
        ",".join(f"{k}={v}" for k, v in MANAGED.items())
    s.execution.max_workers = 4
    return s


async def run(args: argparse.Namespace) -> None:
    # Credentials that cannot be loaded end the process here, with one line.
    api = await api_client(args.kubeconfig)
    registry = component.kopf_registry(args.kubeconfig)
    op_ref: dict[str, Operator] = {"op": Operator(api, args.version)}
    register(registry, op_ref)
    leading = asyncio.Event()

    @kopf.on.startup(registry=registry, id="operator-lease")
    async def lease(memo: kopf.Memo, **_: Any) -> None:
        """Kopf starts watching once this returns: on the leader only."""
        # Ready: leading (or, `?standby=true`, able to lead: the process is up).
        await component.serve_probes(args, ready=lambda: True)
        if not args.leader_elect:
            leading.set()
            return
        from operators.core.leader import run_as_leader

        async def work() -> None:
            leading.set()
            await asyncio.Event().wait()  # leads until the process stops

        lease_api = memo.lease_api = await api_client(args.kubeconfig)
        memo.lease = asyncio.create_task(run_as_leader(lease_api, name=args.lease_name, namespace=args.namespace,
                                                       work=work, **component.lease_options(args)))
        await leading.wait()

    @kopf.on.cleanup(registry=registry, id="operator-lease")
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        if leading.is_set():  # a standby wrote nothing
            await op_ref["op"].withdraw()
        task: asyncio.Task[None] | None = memo.get("lease")
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await memo.lease_api.close()
        await api.close()

    await kopf.operator(registry=registry, settings=settings(), standalone=True, namespaces=[args.namespace],
                        memo=kopf.Memo())


def parser() -> argparse.ArgumentParser:
    p = component.base_parser("operator")
    p.set_defaults(lease_name="kai-operator")
    p.add_argument("--version", default="", help="image tag of the components when the Config names none")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    component.setup_logging(args.log_level, "operator", args.log_format)
    set_user_agent("operator")
    return component.run(lambda: run(args))
