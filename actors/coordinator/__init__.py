"""Consumer groups and work queues: the coordinator of the `__groups` partitions led here."""
