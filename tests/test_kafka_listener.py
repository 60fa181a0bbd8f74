"""The Kafka listener's writer: answers go out in the order their requests came, those
ready behind the first in the same send."""

from __future__ import annotations

import trio
import trio.testing

from quorumlog.actors.kafka.listener import _write_answers
from quorumlog.actors.mailbox import Pending


class Recorder:
    def __init__(self) -> None:
        self.sends: list[bytes] = []

    async def send_all(self, data: bytes) -> None:
        self.sends.append(bytes(data))


async def test_answers_keep_their_order_and_those_ready_share_a_send():
    stream = Recorder()
    send, receive = trio.open_memory_channel[Pending](8)
    slots = [Pending() for _ in range(4)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_write_answers, stream, receive, nursery.cancel_scope)
        for slot in slots:
            await send.send(slot)
        slots[3].resolve(b"d")
        slots[1].resolve(b"b")
        slots[2].resolve(None)  # acks=0: no answer
        await trio.testing.wait_all_tasks_blocked()
        assert stream.sends == []  # the first is not answered yet
        slots[0].resolve(b"a")
        await trio.testing.wait_all_tasks_blocked()
        assert stream.sends == [b"abd"]
        late = Pending()
        await send.send(late)
        after = Pending()
        await send.send(after)
        after.resolve(b"f")
        late.resolve(b"e")
        await send.aclose()
    assert stream.sends == [b"abd", b"ef"]
