"""One partition's Raft group on this node: its actor, intake, reads and the state machines kept in its log."""
