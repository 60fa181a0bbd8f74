"""Everything of a node that runs as tasks, by who owns it:

- `replica/`: one partition's Raft group on this node (its actor and mailbox, the append
  intake, reads, campaigns, retention, and the state machines kept in its log);
- `node/`: the node that hosts the replicas (its handler, storage, flusher, heartbeats,
  disk health, leader balancing, stop);
- `cluster/`: the controller and what it drives (topics, the leader table, replica moves,
  rebalancing, membership calls);
- `coordinator/`: consumer groups and work queues (the `__groups` partitions led here);
- `kafka/`: Kafka's wire protocol over the same topics.
"""
