"""quorumlog: a replicated log service."""
