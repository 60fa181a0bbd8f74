"""`quorumlog serve`'s process: options and start-up (`server.py`), the data directory's
lock, logging, metrics, the allocator settings, and offline unsafe recovery."""
