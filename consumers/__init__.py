"""Consumer groups and work queues, as pure state: assignment and the `__groups` state machine."""
