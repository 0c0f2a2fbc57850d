"""Pinned versions of everything the local control plane builds. Changing one rebuilds only that piece."""

from __future__ import annotations

KUBERNETES = "v1.35.4"  # etcd comes with it: go.etcd.io/etcd/server/v3 as pinned by e2e/kube/go.mod
KWOK = "v0.8.0"
KUBERAY = "v1.5.1"  # ray-operator; v1.5.0 is missing from the checksum database
HELM = "v3.19.4"

KWOK_PACKAGE = f"sigs.k8s.io/kwok/cmd/kwok@{KWOK}"
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_PACKAGE = f"{KUBERAY_MODULE}@{KUBERAY}"
HELM_PACKAGE = f"helm.sh/helm/v3/cmd/helm@{HELM}"
