"""pod-grouper: gives every kai-scheduler pod a PodGroup derived from its top owner (contract section 4)."""
