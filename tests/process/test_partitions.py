"""Real processes behind the harness's proxy (bench/proxy.py): a leader cut off from its
followers must stop acknowledging quorum appends (Kafka's isolated leader kept doing so),
the majority side must elect a new leader and serve, and after healing the old leader
must take the new leader's log."""

from __future__ import annotations

import random

import pytest
import trio

from quorumlog import AsyncClient, QuorumLogError
from quorumlog.bench.proxy import Links, serve_front
from quorumlog.bench.workload import status_of
from quorumlog.cli.localcluster import ProcessCluster, free_ports


async def leader_of(cluster: ProcessCluster, nodes, timeout_s: float = 20.0) -> int:
    with trio.fail_after(timeout_s):
        while True:
            for node_id in nodes:
                status = await status_of(cluster.address(node_id))
                if status and status.get("role") == "leader":
                    return node_id
            await trio.sleep(0.05)


@pytest.mark.parametrize("cut", ["both ways", "leader cannot hear"])
def test_an_isolated_leader_acknowledges_nothing_and_rejoins(tmp_path, cut):
    cluster = ProcessCluster(str(tmp_path), ports=free_ports(3), listen_ports=free_ports(3))
    links = Links(random.Random(1))

    async def main():
        async with trio.open_nursery() as nursery:
            for i in cluster.ids:
                front, port = cluster.ports[i - 1], cluster.listen_ports[i - 1]
                await nursery.start(serve_front, links, i, front, port)
            cluster.start_all()
            old = await leader_of(cluster, cluster.ids)
            others = [i for i in cluster.ids if i != old]
            async with AsyncClient(cluster.address(old), timeout=5.0, direct=True) as c:
                before = await c.append([b"before the cut"])

                if cut == "both ways":
                    links.partition([{old}, set(others)])
                else:  # it can still send (heartbeats reach the followers) but hears nothing
                    for other in others:
                        links.cut_one_way(other, old)
                new = await leader_of(cluster, others)
                with pytest.raises(QuorumLogError):
                    await c.append([b"to the isolated leader"])

            async with AsyncClient(cluster.address(new), timeout=5.0, direct=True) as c:
                during = await c.append([b"on the majority side"])
            assert during == before + 1, "the new leader's barrier takes no offset"

            links.heal()
            with trio.fail_after(30):
                while True:
                    status = await status_of(cluster.address(old))
                    if (
                        status
                        and status["role"] == "follower"
                        and status["commit_offset"] >= during
                    ):
                        break
                    await trio.sleep(0.1)
            async with AsyncClient(cluster.address(old), timeout=5.0, direct=True) as c:
                values = [r.value for r in await c.read(0, 100)]
            assert b"on the majority side" in values and b"before the cut" in values
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        cluster.stop_all()
