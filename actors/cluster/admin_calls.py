"""Admin calls on the leader: membership changes and leadership transfer.

Cluster membership is the controller group's configuration; partition 0 of `default`
lives on every voter, so each call changes the controller's group first, then that
partition's group, whose leader may be on another node (the call is forwarded there,
marked `retry`: if the change is made already, it succeeds at once).

Each call is planned by `membership.driver` from the configuration the leader finds (never
from what an earlier driver remembers: seed 003) and executed one step at a time; every
configuration step is one change, validated and appended by the core, and waited for until
it commits. Answers say what to do next:

- REFUSED: the change can never succeed (unknown node, no voter left): do not retry;
- BUSY: another change or a transfer is under way; STEPPING_DOWN: this leader is moving
  leadership away (it was asked to remove itself, or C(new) leaves it out); NOT_LEADER /
  UNKNOWN: leadership moved meanwhile. All four: retry, against the leader of the moment;
- TIMEOUT: a step did not finish in time; before the joint entry the change was rolled back
  to the starting configuration, and the message says which step failed.

A client retrying after a try whose outcome it does not know (the connection broke, the
answer timed out, leadership moved) marks the call `retry`: if the configuration already is
what the call asks for, the first try made the change and the answer is success.
A call marked `relay` (the mover's: actors/cluster/mover.py) that reaches a replica which does not
lead is passed on once to the leader that replica knows, and its answer comes back: the
caller may have no link to that leader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, assert_never

import trio

from quorumlog.actors.cluster.controller import TOPIC_OPS
from quorumlog.actors.cluster.removal import CLUSTER_CONFIG_OP, cluster_config
from quorumlog.actors.replica.handle import LeadershipLost
from quorumlog.membership.changes import (
    ChangeInProgressError,
    ConfigChangeError,
    add_learner,
    demote,
    enter_joint,
    make_electable,
    promote_again,
    remove,
)
from quorumlog.membership.config import (
    Configuration,
    InvalidConfigurationError,
    check_address,
    check_node_id,
)
from quorumlog.membership.driver import (
    AddLearner,
    Demote,
    EnterJoint,
    LeaveJoint,
    MakeElectable,
    PromoteAgain,
    Remove,
    Step,
    TransferLeadership,
    WaitCaughtUp,
    WaitPromoted,
    plan_add,
    plan_demote,
    plan_promote,
    plan_remove,
    plan_replace,
    plan_set,
    rollback_steps,
)
from quorumlog.raft.roles import NotLeaderError
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import AdminReply, AdminRequest, ErrorCode, ErrorReply, Message

if TYPE_CHECKING:
    from quorumlog.actors.cluster.member import ClusterMember
    from quorumlog.actors.replica.actor import ReplicaActor
    from quorumlog.actors.replica.handle import GroupView

ADMIN_WAIT_S_DEFAULT = 30.0
ADMIN_WAIT_S_MAX = 600.0
# Pause before asking again where a forwarded call found no leader, or one that was busy.
FORWARD_RETRY_S = 0.05
RELAY_SLACK_S = 5.0  # a relayed call waits for the leader's answer this much past its own wait
RETRY_LATER = frozenset(
    {ErrorCode.NOT_LEADER, ErrorCode.UNKNOWN, ErrorCode.BUSY, ErrorCode.STEPPING_DOWN}
)


class StepFailed(Exception):
    pass


def _wait_s(request: AdminRequest) -> float:
    return min(
        max(float(request.args.get("timeout_s", ADMIN_WAIT_S_DEFAULT)), 0.1), ADMIN_WAIT_S_MAX
    )


async def handle_admin(node: ClusterMember, request: AdminRequest) -> Message:
    """A call from a client (the controller's group, then `default`'s), or the forwarded
    part of one (`args["group"]` names the group)."""
    if request.op in TOPIC_OPS:
        return await node.controller_actor.handle(request)
    # Any node answers, from its view (actors/cluster/removal.py).
    if request.op == CLUSTER_CONFIG_OP:
        return AdminReply(cluster_config(node.controller.view))
    group_id = request.args.get("group")
    if group_id is not None:
        group = node.groups.get(group_id)
        if group is None:
            return ErrorReply(ErrorCode.UNKNOWN_TOPIC, f"node {node.id} hosts no group {group_id}")
        return await handle_group_admin(group, request)
    if request.op == "promote_member":
        reply = await _backfill_witness(node, request)
        if reply is not None:
            return reply
    reply = await handle_group_admin(node.controller, request)
    if not isinstance(reply, AdminReply):
        return reply
    forwarded = AdminRequest(
        request.op, {**request.args, "group": node.default_group.group_id, "retry": True}
    )
    with trio.move_on_after(_wait_s(request)):
        return await forward_to_leader(node, node.default_group, forwarded)
    return ErrorReply(
        ErrorCode.TIMEOUT,
        f"{request.op}: the cluster's configuration changed, but the topic 'default' did not "
        "follow in time: retry",
    )


async def _backfill_witness(node: ClusterMember, request: AdminRequest) -> Message | None:
    """A witness of `default` holds only the log's tail: before it may lead, its leader
    copies it the rest (raft/backfill.py). None once it holds the whole log."""
    node_id = check_node_id(request.args["node_id"])
    config = node.default_group.view.config
    if config is None or node_id not in config.witnesses or not config.is_voter(node_id):
        return None
    args = {"node_id": node_id, "group": node.default_group.group_id}
    forwarded = AdminRequest("backfill_member", {**args, "timeout_s": _wait_s(request)})
    with trio.move_on_after(_wait_s(request)):
        reply = await forward_to_leader(node, node.default_group, forwarded)
        if isinstance(reply, AdminReply):
            return None
        if not (isinstance(reply, ErrorReply) and reply.code is ErrorCode.TIMEOUT):
            return reply
    return ErrorReply(
        ErrorCode.TIMEOUT,
        f"node {node_id} is still copying the records before its log start (a witness holds "
        f"only the log's tail; the copy goes on): run `members promote {node_id}` again to "
        "wait for it",
    )


async def forward_to_leader(
    node: ClusterMember, group: ReplicaActor, request: AdminRequest
) -> Message:
    """Run `request` on the leader of `group` (here or on another node) until it answers
    something other than "ask again"."""
    while True:
        leader = group.view.leader_id
        if leader == node.id:
            reply = await handle_admin(node, request)
        elif leader is None:
            reply = None
        else:
            try:
                reply = await node.request(leader, request)
            except ConnectionClosed:
                reply = None
        if reply is not None and not (isinstance(reply, ErrorReply) and reply.code in RETRY_LATER):
            return reply
        await trio.sleep(FORWARD_RETRY_S)


async def handle_group_admin(group: ReplicaActor, request: AdminRequest) -> Message:
    args = request.args
    try:
        with trio.move_on_after(_wait_s(request)) as scope:
            if "revision" in args:
                return await _move(group, request, scope)
            return await _dispatch(group, request.op, args)
        why = _silent(group, request.op, args)
        return ErrorReply(
            ErrorCode.TIMEOUT, f"{request.op} did not finish within {_wait_s(request):g} s{why}"
        )
    except ChangeInProgressError as exc:
        return ErrorReply(ErrorCode.BUSY, str(exc))
    except (ConfigChangeError, InvalidConfigurationError, KeyError, TypeError, ValueError) as exc:
        return ErrorReply(ErrorCode.REFUSED, f"{request.op} refused: {_why(exc)}")
    except NotLeaderError as exc:
        if args.get("relay") and exc.leader_id not in (None, group.node_id):
            return await _relay(group, request, exc.leader_id)
        return group.not_leader(exc.leader_id)
    except LeadershipLost:
        return ErrorReply(
            ErrorCode.UNKNOWN,
            "leadership moved during the change: retry against the new leader",
            group.view.leader_id,
            group.address_of(group.view.leader_id),
        )
    except StepFailed as exc:
        return ErrorReply(ErrorCode.TIMEOUT, str(exc))


async def _relay(group: ReplicaActor, request: AdminRequest, leader_id: int) -> Message:
    """A call marked `relay` on a replica that does not lead, passed on once to the leader
    it knows: the caller may have no link to it. The mover runs on the controller's
    leader, which links only to the nodes it shares a group with, and a node removed from
    the cluster leads its partitions' groups until they move (simulation seed 77020: no
    move reached the removed leader of a group the controller's leader had no part in)."""
    if group.transport is not None:
        relayed = AdminRequest(request.op, {**request.args, "relay": False})
        with trio.move_on_after(_wait_s(request) + RELAY_SLACK_S):
            try:
                return await group.transport.request(leader_id, relayed)
            except ConnectionClosed:
                pass
    return group.not_leader(leader_id)


async def _move(group: ReplicaActor, request: AdminRequest, scope: trio.CancelScope) -> Message:
    """A replica move (actors/cluster/mover.py): a change to the replica set of a controller
    revision. A move of a later revision cancels this one, wherever its plan is (a learner
    it staged and no longer wanted is removed by the later plan); an earlier one is refused."""
    revision = int(request.args["revision"])
    if group.move is not None:
        if group.move[0] > revision:
            return ErrorReply(
                ErrorCode.REFUSED, f"a move of a later revision ({group.move[0]}) is under way"
            )
        group.move[1].cancel()
    group.move = (revision, scope)
    try:
        return await _dispatch(group, request.op, request.args)
    finally:
        if group.move is not None and group.move[1] is scope:
            group.move = None


async def _dispatch(group: ReplicaActor, op: str, args: dict[str, Any]) -> Message:
    view = group.view
    if not view.is_leader:
        raise NotLeaderError(view.leader_id)
    config = view.config
    if args.get("retry") and _made_already(config, op, args):
        # A retry whose first try's answer was lost: the change is there, so it succeeded
        # (without this, "remove 4" retried would be refused: "4 is not a member").
        waits = op == "promote_member" or (op == "add_member" and args.get("wait"))
        if waits and not config.is_voter(args["node_id"]):
            return await _execute(group, (WaitPromoted(args["node_id"]),))
        return AdminReply({"config": config.to_json()})
    match op:
        case "add_member":
            plan = plan_add(
                config,
                check_node_id(args["node_id"]),
                check_address(args["address"]),
                wait_promoted=bool(args.get("wait", False)),
                witness=bool(args.get("witness", False)),
            )
        case "remove_member":
            plan = plan_remove(config, check_node_id(args["node_id"]), group.node_id)
        case "demote_member":
            plan = plan_demote(config, check_node_id(args["node_id"]), group.node_id)
        case "promote_member":
            plan = plan_promote(config, check_node_id(args["node_id"]))
        case "replace_member":
            plan = plan_replace(
                config,
                check_node_id(args["old_id"]),
                check_node_id(args["new_id"]),
                check_address(args["address"]),
                group.node_id,
            )
        case "set_members":
            members = {check_node_id(int(k)): check_address(v) for k, v in args["members"].items()}
            plan = plan_set(config, members, group.node_id)
        case "transfer_leader":
            return await _transfer(group, check_node_id(args["node_id"]))
        case "backfill_member":
            return await _backfill(group, check_node_id(args["node_id"]))
        case "group_members":
            # Every node the group counts or may count: its configuration in effect and
            # the last committed (actors/node/burial.py asks before it deletes a replica).
            members = config.members | view.committed_config.members
            return AdminReply({"members": sorted(members)})
        case _:
            raise ConfigChangeError(f"unknown admin call {op!r}")
    return await _execute(group, plan)


def _made_already(config: Configuration, op: str, args: dict[str, Any]) -> bool:
    """Whether the configuration already is what the call asks for."""
    match op:
        case "add_member":
            node_id = check_node_id(args["node_id"])
            return (
                config.addresses.get(node_id) == args["address"]
                and node_id not in config.log_only
                and (node_id in config.witnesses) == bool(args.get("witness", False))
            )
        case "remove_member":
            return check_node_id(args["node_id"]) not in config.members
        case "demote_member":
            return check_node_id(args["node_id"]) in config.log_only
        case "promote_member":
            return config.can_lead(check_node_id(args["node_id"]))
        case "replace_member":
            old, new = check_node_id(args["old_id"]), check_node_id(args["new_id"])
            return old not in config.members and config.is_voter(new)
        case "set_members":
            wanted = {check_node_id(int(k)) for k in args["members"]}
            # Not made while any learner is left: a stray, or one staged and not promoted.
            return not config.is_joint and config.voters == wanted and not config.learners
    return False


async def _execute(group: ReplicaActor, plan: tuple[Step, ...]) -> Message:
    start = group.view.config
    for step in plan:
        match step:
            case AddLearner(node_id, address, promote, witness):
                await _change(
                    group,
                    lambda config, n=node_id, a=address, p=promote, w=witness: add_learner(
                        config, n, a, promote=p, witness=w
                    ),
                )
            case Demote(node_id):
                await _change(group, lambda config, n=node_id: demote(config, n))
            case PromoteAgain(node_id):
                await _change(group, lambda config, n=node_id: promote_again(config, n))
            case MakeElectable(node_id):
                await _change(group, lambda config, n=node_id: make_electable(config, n))
            case WaitCaughtUp(node_id):
                await _wait_caught_up(group, node_id, start, step)
            case WaitPromoted(node_id):
                await _wait_for(
                    group, lambda v, n=node_id: v.committed_config.is_voter(n), leader=False
                )
            case TransferLeadership(away_from, candidates):
                if group.node_id == away_from:
                    target = await group.hand_over(candidates)
                    return ErrorReply(
                        ErrorCode.STEPPING_DOWN,
                        f"node {group.node_id} leads and is leaving: leadership moves to node "
                        f"{target}; "
                        "retry against it",
                        target,
                        group.address_of(target),
                    )
            case EnterJoint(voters):
                await _change(group, lambda config, v=dict(voters): enter_joint(config, v))
            case LeaveJoint():
                # The leader appends C(new) by itself once C(old,new) commits; wait for it,
                # as a follower too if this leader is not in C(new) and stepped down.
                await _wait_for(group, lambda v: not v.committed_config.is_joint, leader=False)
            case Remove(node_id):
                await _change(group, lambda config, n=node_id: remove(config, n))
            case _:
                assert_never(step)
    return AdminReply({"config": group.view.config.to_json()})


async def _change(group: ReplicaActor, build: Callable[[Configuration], Configuration]) -> None:
    """One configuration change of the one in effect: validated and appended in the
    replica's task, then committed."""
    term, offset = await group.change_config(build)
    await _wait_for(group, lambda v: v.term == term and v.commit_offset >= offset)


async def _wait_caught_up(
    group: ReplicaActor, node_id: int, start: Configuration, step: Step
) -> None:
    deadline_s = 10 * group.settings.election_timeout_max_s + 30.0

    with trio.move_on_after(deadline_s):
        await group.wait_caught_up(node_id)
        return
    for undo in rollback_steps(start, group.view.config):
        await _change(group, lambda config, n=undo.node_id: remove(config, n))
    raise StepFailed(
        f"step {step} failed: node {node_id} did not catch up within {deadline_s:g} s; "
        "rolled back to the starting configuration"
    )


async def _wait_for(
    group: ReplicaActor, done: Callable[[GroupView], bool], leader: bool = True
) -> None:
    """Until `done` holds of the group's view (LeadershipLost if, `leader`, this node
    stops leading the term it led at the start)."""
    term = group.view.term
    view = await group.wait_until(
        lambda v: done(v) or (leader and (not v.is_leader or v.term != term))
    )
    if not done(view):
        raise LeadershipLost


async def _backfill(group: ReplicaActor, node_id: int) -> Message:
    """The leader copies a follower the records before its log start; answers once the
    follower's log starts where the leader's does."""

    await group.backfill(node_id)
    return AdminReply({})


async def _transfer(group: ReplicaActor, target: int) -> Message:
    config = group.view.config
    if target == group.node_id:
        return AdminReply({"leader_id": target})
    if config.is_learner(target):
        raise ConfigChangeError(f"node {target} is a learner: it cannot lead until promoted")
    if target in config.witnesses:
        raise ConfigChangeError(f"node {target} is a witness: it never leads")
    await group.transfer_leadership(target)
    view = await group.wait_until(
        lambda v: (
            v.leader_id not in (None, group.node_id) or (v.is_leader and v.transfer_to is None)
        )
    )
    if view.leader_id == target:
        return AdminReply({"leader_id": target})
    if view.is_leader:
        return ErrorReply(
            ErrorCode.TIMEOUT,
            f"node {target} did not take over within an election timeout; node "
            f"{group.node_id} still leads",
        )
    raise LeadershipLost


def _silent(group: ReplicaActor, op: str, args: dict[str, Any]) -> str:
    """Why a change that timed out may have: the nodes it needs that this leader has no
    link to (a node to add that is not running, say), with their addresses."""
    if op in ("remove_member", "demote_member"):
        return ""  # the node it names need not answer
    named: dict[int, str | None] = {}
    for key, address_key in (("node_id", "address"), ("new_id", "address")):
        if isinstance(args.get(key), int):
            named[args[key]] = args.get(address_key)
    members = args.get("members")
    if isinstance(members, dict):
        named.update({int(k): v for k, v in members.items() if str(k).isdigit()})
    silent = [
        f"node {n} at {address or group.address_of(n) or '?'}"
        for n, address in sorted(named.items())
        if n != group.node_id and not group.peer_alive(n)
    ]
    if not silent:
        return ""
    return (
        f": {', '.join(silent)} cannot be reached (is it running? a new node is started with "
        "`quorumlog serve --join`)"
    )


def _why(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing argument {exc}"
    return str(exc)
