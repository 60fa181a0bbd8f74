"""Everything of a node that runs as tasks, by who owns it:

- `services/`: what a node's actors share (its data directory, flusher, metadata writer,
  heartbeats, disk health, stall watch, stats);
- `replica/`: one partition's Raft group on this node (its actor and mailbox, the append
  intake, reads, campaigns, retention, and the state machines kept in its log);
- `cluster/`: the controller and what it drives (topics, the leader table, replica moves,
  rebalancing, membership calls);
- `coordinator/`: consumer groups and work queues (the `__groups` partitions led here);
- `kafka/`: Kafka's wire protocol over the same topics;
- `node/`: the node on top of them all (its handler, group manager, leader balancing,
  burial of moved replicas, stop).

Each subfolder imports only those above it in this list, `services/` none
(tests/test_layers.py).
"""
