"""podgroup-controller: PodGroup.status.resourcesStatus from the group's pods, and PodGroup validation."""
