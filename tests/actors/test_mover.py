"""How the mover (actors/cluster/mover.py) finds the leader of a group it moves, and how a replica
that does not lead passes a move on (actors/cluster/admin_calls.py): a node that is gone costs a short
probe, not a call's whole wait (seed 77017), and a leader the controller's leader has no
link to is reached through the replicas that do (seed 77020)."""

from types import SimpleNamespace

import trio

from quorumlog.actors.cluster.admin_calls import handle_group_admin
from quorumlog.actors.cluster.mover import MOVE_TIMEOUT_S, PROBE_S, ReplicaMover
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import AdminReply, AdminRequest, ErrorCode, ErrorReply

GROUP = 7
MOVE = AdminRequest(
    "set_members",
    {"group": GROUP, "members": {"2": "b", "3": "c", "5": "e"}, "revision": 9, "retry": True},
)


def mover(answer, hint: int | None, departed: tuple[int, ...]) -> tuple[ReplicaMover, list]:
    """A mover on node 9, the controller's leader, sharing no group with the others; each
    request it sends goes to `answer(node_id, request)`, and is noted."""
    sent: list[tuple[int, AdminRequest]] = []

    async def request(node_id: int, message: AdminRequest):
        sent.append((node_id, message))
        return await answer(node_id, message)

    brokers = {2: "b", 3: "c", 5: "e", 9: "i"}
    state = SimpleNamespace(brokers=brokers, addresses={**brokers, **{n: "x" for n in departed}})
    controller = SimpleNamespace(state=state, leader_hint=lambda topic, partition: hint)
    node = SimpleNamespace(
        id=9,
        controller_actor=controller,
        settings=SimpleNamespace(election_timeout_max_s=0.6),
        request=request,
    )
    return ReplicaMover(node), sent


def leader(node_id: int) -> ErrorReply:
    return ErrorReply(ErrorCode.NOT_LEADER, "not the leader", node_id, None)


async def test_departed_nodes_that_answer_nothing_cost_one_short_probe(autojump_clock):
    """Node 5 leads; the leader table still names node 1, which left with nodes 4 and 6,
    and none of the three answers (a request lost, a node gone): the move reaches node 5
    within PROBE_S, where asking them in turn once took a call's whole wait each."""

    async def answer(node_id, request):
        if node_id in (1, 4, 6):
            await trio.sleep_forever()
        if node_id == 5:
            return AdminReply({"members": [1, 2, 5]} if request.op == "group_members" else {})
        return leader(5)

    moving, sent = mover(answer, hint=1, departed=(1, 4, 6))
    reply = await moving._on_leader("t1", 4, (2, 3, 5), MOVE)
    assert isinstance(reply, AdminReply)
    assert trio.current_time() <= PROBE_S + 0.01
    assert [n for n, r in sent if r.op == "set_members"] == [5]  # the leader alone


async def test_a_move_waits_for_no_one_when_nobody_leads(autojump_clock):
    """An election under way, the departed nodes silent: nothing to ask, after one probe."""

    async def answer(node_id, request):
        if node_id in (1, 4):
            await trio.sleep_forever()
        return leader(None)

    moving, sent = mover(answer, hint=None, departed=(1, 4))
    assert await moving._on_leader("t1", 4, (2, 3, 5), MOVE) is None
    assert trio.current_time() <= PROBE_S + 0.01
    assert all(r.op == "group_members" for _, r in sent)


async def test_a_leader_handing_over_is_followed_to_the_one_it_names(autojump_clock):
    """Node 1 (departed) leads and must hand over before C(new) leaves it out: the move
    waits for the handover and asks node 2, which leads by then."""
    leads = {"now": 1}

    async def answer(node_id, request):
        if node_id != leads["now"]:
            return leader(leads["now"])
        if request.op == "group_members":
            return AdminReply({"members": [1, 2, 5]})
        if node_id == 1:
            leads["now"] = 2
            return ErrorReply(ErrorCode.STEPPING_DOWN, "leaving", 2, None)
        return AdminReply({})

    moving, sent = mover(answer, hint=1, departed=(1,))
    assert isinstance(await moving._on_leader("t1", 4, (2, 3, 5), MOVE), AdminReply)
    assert [n for n, r in sent if r.op == "set_members"] == [1, 2]


async def test_a_leader_this_node_cannot_reach_is_asked_through_a_replica(autojump_clock):
    """Seed 77020: node 1 left the cluster and leads the group, and the controller's
    leader has no link to it (it shares no group with it). The replicas that name it pass
    the call on (`relay`), and the move is made there."""
    reached = []

    async def answer(node_id, request):
        if node_id == 1:
            raise ConnectionClosed("no connection to peer 1")
        if not request.args.get("relay"):
            return leader(1)
        reached.append((node_id, request.op))
        return AdminReply({"members": [1, 2, 5]} if request.op == "group_members" else {})

    moving, sent = mover(answer, hint=1, departed=(1,))
    assert isinstance(await moving._on_leader("t0", 3, (5, 3, 2), MOVE), AdminReply)
    assert (5, "set_members") in reached or (2, "set_members") in reached
    assert all(r.args["relay"] for _, r in sent)


def follower(leader_id: int, transport) -> SimpleNamespace:
    return SimpleNamespace(
        node_id=5,
        view=SimpleNamespace(is_leader=False, leader_id=leader_id),
        move=None,
        transport=transport,
        not_leader=lambda n: leader(n),
    )


async def test_a_replica_that_does_not_lead_relays_a_call_marked_so_once(autojump_clock):
    relayed = []

    class Transport:
        async def request(self, peer, message):
            relayed.append((peer, message))
            return AdminReply({"config": "made"})

    group = follower(1, Transport())
    marked = AdminRequest(MOVE.op, {**MOVE.args, "relay": True})
    assert await handle_group_admin(group, marked) == AdminReply({"config": "made"})
    [(peer, message)] = relayed
    assert peer == 1 and message.op == "set_members" and message.args["relay"] is False
    # Not marked: the caller is told who leads, as before.
    assert await handle_group_admin(group, MOVE) == leader(1)


async def test_a_relay_to_a_leader_gone_answers_who_leads(autojump_clock):
    class Transport:
        async def request(self, peer, message):
            await trio.sleep_forever()

    group = follower(1, Transport())
    marked = AdminRequest(MOVE.op, {**MOVE.args, "relay": True, "timeout_s": 1.0})
    assert await handle_group_admin(group, marked) == leader(1)
    assert trio.current_time() < MOVE_TIMEOUT_S
