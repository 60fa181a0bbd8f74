"""Kafka transactions as pure state: the `__transactions` state machine its coordinators apply."""
