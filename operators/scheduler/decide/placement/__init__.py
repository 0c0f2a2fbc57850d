"""Where a task can go (predicates), in which order (scoring) and on which GPUs (gpus)."""
