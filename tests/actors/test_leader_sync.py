"""A node's own leader entries (actors/leader_sync.py) carry the revision of their topic:
one made before the node's state holds the topic would lose to any later entry of it."""

from types import SimpleNamespace

from quorumlog.actors.leader_sync import LeaderTableSync
from quorumlog.controller.leaders import LeaderEntry


def node_restarted_before_its_state():
    """Node 4 leads t0/1 (term 2) and opened it from disk: its controller state has not
    applied the topic's creation (at offset 2) yet."""
    replica = SimpleNamespace(view=SimpleNamespace(leader_id=4, term=2))
    state = SimpleNamespace(topics={})
    ctl = SimpleNamespace(
        state=state,
        node=SimpleNamespace(partitions={("t0", 1): replica}),
        signal=lambda: None,
    )
    return LeaderTableSync(ctl), state, replica


def test_a_replica_of_a_topic_not_yet_applied_is_announced_once_it_is():
    sync, state, replica = node_restarted_before_its_state()
    sync.local_changed("t0", 1, replica)
    assert sync.table.get("t0", 1) is None  # no entry without the topic's revision
    # A follower that has applied the topic but heard no leader yet reports none.
    sync.table.merge([LeaderEntry("t0", 1, None, 2, 2)])
    state.topics["t0"] = SimpleNamespace(partitions=[None, SimpleNamespace(created_offset=2)])
    sync.topics_applied()
    assert sync.table.get("t0", 1) == LeaderEntry("t0", 1, 4, 2, 2)


def test_a_replica_gone_before_its_topic_is_applied_is_forgotten():
    sync, state, replica = node_restarted_before_its_state()
    sync.local_changed("t0", 1, replica)
    sync._ctl.node.partitions.clear()  # deleted meanwhile
    state.topics["t0"] = SimpleNamespace(partitions=[None, SimpleNamespace(created_offset=2)])
    sync.topics_applied()
    assert sync.table.get("t0", 1) is None
