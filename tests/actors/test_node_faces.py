"""The services a node runs take a narrow face of it, a protocol beside each of them,
rather than the node (issue 46): a real node must be every one of them, so that a face
naming something the node lacks, or a node that loses a name a face relies on, fails
here and not in a running cluster."""

from __future__ import annotations

import trio

from quorumlog.actors.cluster.controller import ControllerHost
from quorumlog.actors.cluster.member import ClusterMember
from quorumlog.actors.cluster.removal import RemovalHost
from quorumlog.actors.kafka.host import KafkaHost
from quorumlog.actors.node.burial import BurialHost
from quorumlog.server.metrics import MeasuredNode
from tests.actors.test_node_appends import one_node

FACES = (ClusterMember, ControllerHost, KafkaHost, BurialHost, RemovalHost, MeasuredNode)


async def test_a_node_is_every_face_its_services_take(autojump_clock):
    async with trio.open_nursery() as nursery:
        _, node = await one_node(nursery)
        missing = [face.__name__ for face in FACES if not isinstance(node, face)]
        assert not missing
        nursery.cancel_scope.cancel()


def test_a_face_that_names_what_the_node_lacks_is_told():
    """The check above can fail: an object with only some of the names is not a face."""

    class Partial:
        id = 1

        async def request(self, peer, message):
            return None

    assert not any(isinstance(Partial(), face) for face in FACES)
