"""The node: its replicas' host, storage, flusher, heartbeats, health and stop."""
