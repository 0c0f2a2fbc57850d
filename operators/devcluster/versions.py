"""Pinned versions of everything the local control plane builds. Changing one rebuilds only that piece."""

from __future__ import annotations

KUBERNETES = "v1.35.4"  # etcd comes with it: go.etcd.io/etcd/server/v3 as pinned by e2e/kube/go.mod
KWOK = "v0.8.0"
KUBERAY = "v1.6.1"  # ray-operator; the first release whose kai-scheduler plugin accepts RayJobs
HELM = "v3.19.4"

# Each is built from its module under e2e/tools/<name>, whose go.mod pins the version above (keep them equal).
KWOK_COMMAND = "sigs.k8s.io/kwok/cmd/kwok"
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_PACKAGE = f"{KUBERAY_MODULE}@{KUBERAY}"
HELM_COMMAND = "helm.sh/helm/v3/cmd/helm"
