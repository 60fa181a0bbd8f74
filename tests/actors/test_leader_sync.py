"""A node's own leader entries (actors/cluster/leader_table.py) carry the revision of their topic:
one made before the node's state holds the topic would lose to any later entry of it."""

from types import SimpleNamespace

from quorumlog.actors.cluster.leader_table import LeaderTableSync, _pack
from quorumlog.controller.leaders import LeaderEntry
from quorumlog.transport.messages import LeaderUpdates


def node_restarted_before_its_state():
    """Node 4 leads t0/1 (term 2) and opened it from disk: its controller state has not
    applied the topic's creation (at offset 2) yet."""
    replica = SimpleNamespace(view=SimpleNamespace(leader_id=4, term=2))
    state = SimpleNamespace(topics={}, applied_offset=1)
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


# --------------------------------------------------------------- a leader steps down


def node_leading(node_id: int, hosted: bool = True):
    """Node `node_id`'s sync, its state holding t0 (partition 1 created at offset 2), and
    its replica of t0/1 (which, `hosted`, leads term 2)."""
    replica = SimpleNamespace(view=SimpleNamespace(leader_id=node_id, term=2, is_leader=True))
    ctl = SimpleNamespace(
        state=SimpleNamespace(
            topics={"t0": SimpleNamespace(partitions=[None, SimpleNamespace(created_offset=2)])},
            applied_offset=7,
        ),
        node=SimpleNamespace(id=node_id, partitions={("t0", 1): replica} if hosted else {}),
        group=SimpleNamespace(view=SimpleNamespace(is_leader=False)),
        applied_through=7,
        signal=lambda: None,
    )
    return LeaderTableSync(ctl), replica


def sent(sync: LeaderTableSync) -> LeaderUpdates:
    """What the node's next batch of updates carries (and empties it)."""
    message = LeaderUpdates(_pack(list(sync._outgoing.values())), False)
    sync._outgoing.clear()
    return message


def test_a_leader_that_steps_down_reports_it_and_the_other_tables_and_digests_follow():
    """Issue 45: check-quorum stepped node 4 down in its term; its table and every other
    node's said "4" for good (no entry of the same term could replace it)."""
    leader, replica = node_leading(4)
    other, _ = node_leading(1, hosted=False)
    leader.local_changed("t0", 1, replica)
    other.on_updates(4, sent(leader))
    assert other.table.get("t0", 1).leader_id == 4
    assert other.digest() == leader.digest()

    replica.view = SimpleNamespace(leader_id=None, term=2, is_leader=False)  # stepped down
    leader.local_changed("t0", 1, replica)
    assert leader.table.get("t0", 1) == LeaderEntry("t0", 1, None, 2, 2, ended=True)
    assert other.digest() != leader.digest()  # what the controller's digest would repair
    other.on_updates(4, sent(leader))
    assert other.table.get("t0", 1) == LeaderEntry("t0", 1, None, 2, 2, ended=True)
    assert other.digest() == leader.digest()
    # A late copy of the old news changes nothing.
    other.on_updates(2, LeaderUpdates(_pack([LeaderEntry("t0", 1, 4, 2, 2)]), False))
    assert other.table.get("t0", 1).leader_id is None


def test_a_node_that_stepped_down_before_a_restart_corrects_the_tables_naming_it():
    """Restarted, node 4's replica is a follower of term 2 with no leader; the table the
    controller sends back still names 4 (its old news): node 4 says the term ended."""
    restarted, replica = node_leading(4)
    replica.view = SimpleNamespace(leader_id=None, term=2, is_leader=False)
    restarted.local_changed("t0", 1, replica)
    assert restarted.table.get("t0", 1).leader_id is None
    sent(restarted)
    restarted.on_updates(1, LeaderUpdates(_pack([LeaderEntry("t0", 1, 4, 2, 2)]), False))
    assert restarted.table.get("t0", 1) == LeaderEntry("t0", 1, None, 2, 2, ended=True)
    assert [e.ended for e in restarted._outgoing.values()] == [True]


def test_a_follower_that_lost_its_leader_does_not_end_the_term():
    """Only the leader's own node may say its term's leadership ended: a follower cut off
    from a leader that still has its majority must not erase it."""
    sync, replica = node_leading(2)
    sync.table.merge([LeaderEntry("t0", 1, 4, 2, 2)])
    replica.view = SimpleNamespace(leader_id=None, term=2, is_leader=False)  # pre-vote
    sync.local_changed("t0", 1, replica)
    assert sync.table.get("t0", 1).leader_id == 4


def test_entries_of_a_deleted_topic_are_not_taken_back():
    """Issue 51: a peer's update that crossed the topic's deletion put its entries back in
    the table for good. An entry of a topic the state made and lost is refused and
    forgotten; one of a topic made after what the state applied is kept (it lags)."""
    sync, _ = node_leading(1, hosted=False)
    update = LeaderUpdates(_pack([LeaderEntry("t0", 1, 4, 2, 2)]), False)
    sync._ctl.state.topics.clear()  # deleted (at offset 7 at the latest)
    sync.on_updates(4, update)
    assert sync.table.get("t0", 1) is None
    sync.table.merge([LeaderEntry("t0", 1, 4, 2, 2), LeaderEntry("t9", 0, 4, 1, 9)])
    sync.topics_applied()
    assert sync.table.get("t0", 1) is None
    assert sync.table.get("t9", 0) is not None, "made after what this node applied"
