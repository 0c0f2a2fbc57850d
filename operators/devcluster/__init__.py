"""The local control plane: a real, small Kubernetes built from upstream Go modules (`kai dev up|down`)."""
