"""The real node of the local control plane: containerd, kubelet and kube-proxy in a network namespace of their own."""
