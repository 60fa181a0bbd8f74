"""The node: its transport, the group replicas it hosts, and the handler that routes every
message to the group it names.

The node's nursery supervises its groups: a storage error in any of them stops the whole
node (fail-stop). Peer links follow the union of the groups' configurations. Client calls
go to the group of the log they address; status, admin calls and metrics speak of the
default group.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import structlog
import trio

from actors.admin import handle_admin
from actors.group import GroupActor
from actors.stats import NodeStats
from actors.storage import NodeStorage
from log.wal import Log, RunSync, run_inline
from raft.core import RaftCore
from raft.settings import RaftSettings
from transport.messages import (
    AdminRequest,
    AppendEntries,
    AppendEntriesReply,
    AppendRequest,
    AppendResult,
    EndOffsetRequest,
    ErrorCode,
    ErrorReply,
    Heartbeat,
    HeartbeatReply,
    Message,
    ReadRequest,
    StatusReply,
    StatusRequest,
    TimeoutNow,
    VoteReply,
    VoteRequest,
)
from transport.messages import (
    Role as ConnectionRole,
)
from transport.network import Answer, ConnectionInfo, Handler, NodeTransport

logger = structlog.get_logger("quorumlog.node")

# The group of the default log (one group per node until the group manager lands).
DEFAULT_GROUP = 0

RAFT_TYPES = (
    AppendEntries,
    AppendEntriesReply,
    VoteRequest,
    VoteReply,
    TimeoutNow,
    Heartbeat,
    HeartbeatReply,
)

OpenTransport = Callable[[Handler], AbstractAsyncContextManager[NodeTransport]]


class NodeHandler:
    """What the node gives its transport: every message goes to `Node.handle`; client
    appends are taken without a task of their own (`Node.take_request`)."""

    __slots__ = ("_handle", "take_request")

    def __init__(self, node: Node) -> None:
        self._handle = node.handle
        self.take_request = node.take_request

    def __call__(self, peer: ConnectionInfo, message: Message) -> Awaitable[Message | None]:
        return self._handle(peer, message)


class Node:
    def __init__(
        self,
        node_id: int,
        storage: NodeStorage,
        *,
        settings: RaftSettings,
        rng: random.Random,
        run_sync: RunSync = run_inline,
    ):
        self.id = node_id
        self.settings = settings
        self.stats = NodeStats()
        self.default_group = GroupActor(
            node_id,
            DEFAULT_GROUP,
            storage,
            settings=settings,
            rng=rng,
            run_sync=run_sync,
            stats=self.stats,
            on_config_changed=self._update_peers,
        )
        self.groups: dict[int, GroupActor] = {DEFAULT_GROUP: self.default_group}
        self._transport: NodeTransport | None = None

    @property
    def core(self) -> RaftCore:
        return self.default_group.core

    @property
    def log(self) -> Log:
        return self.default_group.log

    async def run(
        self, open_transport: OpenTransport, *, task_status=trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled; raises StorageError on a disk fault (fail-stop)."""
        async with open_transport(NodeHandler(self)) as transport, trio.open_nursery() as nursery:
            self._transport = transport
            self._update_peers()
            for group in self.groups.values():
                await nursery.start(group.run, transport)
            task_status.started(self)

    def _update_peers(self) -> None:
        """Links to every node that shares a group with this one."""
        if self._transport is None:
            return
        peers: dict[int, str] = {}
        for group in self.groups.values():
            config = group.core.config
            if config is not None:
                peers.update(config.addresses)
        peers.pop(self.id, None)
        self._transport.set_peers(peers)

    async def save_metadata(self) -> None:
        for group in self.groups.values():
            await group.save_metadata()

    # ------------------------------------------------------------------- the handler

    async def handle(self, peer: ConnectionInfo, message: Message) -> Message | None:
        """Everything sent to this node, from peers and clients (transport/network.py)."""
        if isinstance(message, RAFT_TYPES):
            if peer.role is not ConnectionRole.PEER or peer.node_id is None:
                return ErrorReply(ErrorCode.PROTOCOL, "Raft messages come from peers only")
            group = self.groups.get(message.group)
            if group is None:
                return self._unknown_group(message)
            return await group.deliver(peer.node_id, message)
        group = self.default_group
        match message:
            case AppendRequest():
                return await group.append(message)
            case ReadRequest(offset, bytes_max):
                return group.read(offset, bytes_max)
            case EndOffsetRequest(linearizable):
                return await group.end_offset(linearizable)
            case StatusRequest():
                return StatusReply(group.status())
            case AdminRequest():
                return await handle_admin(group, message)
            case _:
                return ErrorReply(ErrorCode.PROTOCOL, f"unexpected {type(message).__name__}")

    def _unknown_group(self, message: Message) -> Message | None:
        """A Raft message for a group this node does not host: a heartbeat request is
        answered so (ReadIndex), anything else is dropped as Raft drops a lost message."""
        logger.debug("unknown_group", node_id=self.id, group=message.group)
        if isinstance(message, Heartbeat):
            return HeartbeatReply(
                message.group, self.id, -1, -1, -1, AppendResult.GROUP_UNAVAILABLE, -1, -1
            )
        return None

    def take_request(self, peer: ConnectionInfo, message: Message, answer: Answer) -> bool:
        """A client append, taken without a task to wait for it (transport/network.py).
        False for anything else, and when the group's mailbox is full."""
        if type(message) is not AppendRequest:
            return False
        return self.default_group.take_append(message, answer)
