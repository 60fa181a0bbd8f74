"""One Raft group's rules as plain synchronous code (installed as `quorumlog.raft`)."""
