"""queue-controller: Queue.status from PodGroups and child queues, Queue validation, kai_queue_* metrics."""
