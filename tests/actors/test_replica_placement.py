"""Which configuration a node's new replica starts with, and a burial that a move placing
the replica here again must not finish (seeds 80174 and 80100 of `bench sim`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from quorumlog.actors.cluster.controller import ControllerActor
from quorumlog.actors.node.node import Node
from quorumlog.controller.commands import CreateTopic, RegisterBroker, SetReplicas
from quorumlog.controller.state import ClusterState


def state_after(*commands) -> ClusterState:
    state = ClusterState()
    for node_id in range(1, 6):
        state.apply(RegisterBroker(node_id, f"127.0.0.1:700{node_id}"), node_id)
    for offset, command in enumerate(commands, start=10):
        assert state.apply(command, offset) is None
    return state


def first_config(state: ClusterState, node_id: int, tombstones=None):
    node = SimpleNamespace(id=node_id, storage=SimpleNamespace(tombstones=tombstones or {}))
    actor = SimpleNamespace(node=node, state=state)
    return ControllerActor._first_config(actor, state.partition("t", 0))


def test_a_node_of_the_creation_set_bootstraps_its_group_even_after_a_move():
    """Node 3 applies the creation on (4, 3, 5) and the move to (2, 3, 5) at once: it
    still counts for the group's first quorum, with node 5 (node 4 never made its
    replica). Made as a joiner instead, node 5 alone could never lead to make the move."""
    state = state_after(CreateTopic("t", ((4, 3, 5),)), SetReplicas("t", 0, (2, 3, 5)))
    assert state.partition("t", 0).created_replicas == (4, 3, 5)
    for node_id in (3, 5):
        config = first_config(state, node_id)
        assert config is not None and config.voters == {3, 4, 5}


def test_a_node_placed_by_a_move_or_placed_again_joins():
    state = state_after(CreateTopic("t", ((4, 3, 5),)), SetReplicas("t", 0, (2, 3, 5)))
    group_id = state.partition("t", 0).group_id
    assert first_config(state, 2) is None, "placed by the move: its leader adds it"
    # Its replica was moved off and buried here before: the group has moved on since.
    assert first_config(state, 3, tombstones={("t", 0): group_id}) is None
    # A tombstone of an older group of the same name (the topic was made again) is not it.
    assert first_config(state, 3, tombstones={("t", 0): group_id - 1}) is not None


class Buried(Exception):
    pass


def node_with_replica(state: ClusterState, node_id: int):
    async def stop_replica(key):
        raise Buried(key)

    node = SimpleNamespace(
        id=node_id,
        partitions={("t", 0): SimpleNamespace(group_id=state.partition("t", 0).group_id)},
        controller_actor=SimpleNamespace(state=state),
        _replicas_changing=trio.Lock(),
        _stop_replica=stop_replica,
        member=True,
    )
    node.is_member = lambda: node.member
    node.moved_off = lambda key: Node.moved_off(node, key)
    return node


async def test_a_replica_placed_here_again_while_its_leader_was_asked_is_not_buried():
    """Burial asks the group's leader whether it still counts this node; a move that puts
    the replica back meanwhile must win, or nothing makes the replica again and the learner
    the move added never catches up (seed 80100)."""
    state = state_after(CreateTopic("t", ((1, 2, 3),)), SetReplicas("t", 0, (1, 3, 4)))
    node = node_with_replica(state, 2)
    assert node.moved_off(("t", 0))
    state.apply(SetReplicas("t", 0, (1, 2, 3)), 20)  # placed here again
    await Node.bury_partition(node, ("t", 0))  # checks again: buries nothing

    state.apply(SetReplicas("t", 0, (1, 3, 4)), 21)
    with pytest.raises(Buried):  # a replica still moved off is buried
        await Node.bury_partition(node, ("t", 0))


async def test_a_removed_node_buries_what_its_stale_state_still_places_on_it():
    """A removed node's controller state stands still: it may still place the replica on
    it. Once the group's leader says the group no longer counts it, it is buried."""
    state = state_after(CreateTopic("t", ((1, 2, 3),)))
    node = node_with_replica(state, 2)
    await Node.bury_partition(node, ("t", 0))  # a member, placed here: kept
    node.member = False
    with pytest.raises(Buried):  # a removed node keeps no replica its group no longer counts
        await Node.bury_partition(node, ("t", 0))
