"""The cluster's controller and what it drives: topics, the leader table, moves, rebalancing, membership calls."""
