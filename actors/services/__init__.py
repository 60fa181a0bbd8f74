"""What a node's actors share: its data directory, flusher, metadata writer, heartbeats,
disk health, stall watch, cluster-id guard and stats. They import no other actor; the node
(actors/node/) builds them and hands each actor the ones it needs."""
