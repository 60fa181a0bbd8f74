from quorumlog.actors.services.wire import register_raft_messages

# The transport's tests carry Raft's messages too (the hot ones): the node registers them.
register_raft_messages()
