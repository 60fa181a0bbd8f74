"""The Kafka listener's writer: answers go out in the order their requests came, those
ready behind the first in the same send; a Produce whose timeout passes is answered as it
stands, its partitions not yet appended REQUEST_TIMED_OUT."""

from __future__ import annotations

import trio
import trio.testing
from kio.schema.errors import ErrorCode as K

from quorumlog.actors.kafka.listener import _Answers
from quorumlog.actors.kafka.produce import ProduceAnswer
from quorumlog.transport.messages import Acks, AppendReply


class Recorder:
    def __init__(self) -> None:
        self.sends: list[bytes] = []

    async def send_all(self, data: bytes) -> None:
        self.sends.append(bytes(data))


async def test_answers_keep_their_order_and_those_ready_share_a_send():
    stream = Recorder()
    answers = _Answers(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answers.write, nursery.cancel_scope)
        slots = [await answers.slot() for _ in range(4)]
        slots[3].resolve(b"d")
        slots[1].resolve(b"b")
        slots[2].resolve(None)  # acks=0: no answer
        await trio.testing.wait_all_tasks_blocked()
        assert stream.sends == []  # the first is not answered yet
        slots[0].resolve(b"a")
        await trio.testing.wait_all_tasks_blocked()
        assert stream.sends == [b"abd"]
        late = await answers.slot()
        after = await answers.slot()
        after.resolve(b"f")
        late.resolve(b"e")
        answers.close()
    assert stream.sends == [b"abd", b"ef"]


async def test_a_produce_past_its_timeout_answers_what_it_has_and_ignores_the_rest(
    autojump_clock,
):
    answer = ProduceAnswer(Acks.QUORUM, wait_s=5.0)
    first = answer.expect("t", 0)
    second = answer.expect("t", 1)
    answer.all_expected()
    completed: list[dict | None] = []
    expired: list[dict | None] = []
    stream = Recorder()
    answers = _Answers(stream)

    def expire() -> None:
        expired.append(answer.expire())
        slot.resolve(b"expired")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answers.write, nursery.cancel_scope)
        slot = await answers.slot()
        slot.expires(answer.deadline, expire)
        answer.when_complete(completed.append)
        first(AppendReply(7, 7, 7, 7, 7))
        await trio.sleep(4.9)
        assert stream.sends == []  # still within its timeout
        await trio.sleep(0.2)
        assert stream.sends == [b"expired"]
        second(AppendReply(8, 8, 8, 8, 8))  # too late: answered as timed out already
        answers.close()
    assert completed == []
    [[topic]] = [values["responses"] for values in expired]
    assert topic["name"] == "t"
    assert [
        (p["index"], p.get("error_code"), p["base_offset"]) for p in topic["partition_responses"]
    ] == [
        (0, None, 7),
        (1, K.request_timed_out, -1),
    ]
