"""`quorumlog bench transport`: the codec, and one TCP connection beside a raw trio socket.

- codec: AppendEntries carrying 32 KiB and 1 MiB of real batches (log/batch.py), encoded to
  frame pieces as a connection writes them (the batches are not copied) and decoded
  through FrameDecoder (fed the frame, so one copy in and one out), in messages/s and MB/s;
- loopback: one authenticated connection on 127.0.0.1 streaming those AppendEntries one-way
  to a node's listener (decoded, handed to its handler), beside a raw trio socket pair
  sending the very same frame bytes and only counting them, measured alternately in the
  same run on connections that stay open and were warmed up, as peer links are. Both ends
  of both run in this one trio thread, so the figures are what one core can carry; the
  target is a ratio of at least 0.7.

Figures are medians over the repetitions, the ratio the median of the ratios of each
back-to-back pair; MB is 10**6 bytes of frames.
"""

from __future__ import annotations

import random
import sys
import time
from functools import partial

import structlog
import trio

from quorumlog.actors.services.wire import register_raft_messages
from quorumlog.bench.report import median, print_table
from quorumlog.log.batch import build_batch, with_offset_and_term
from quorumlog.raft.messages import AppendEntries
from quorumlog.transport.codec import encode_frame, encode_frame_parts
from quorumlog.transport.framing import FrameDecoder
from quorumlog.transport.tcp import open_connection, open_tcp_transport

KIB = 1024
MB = 1_000_000
BATCH_PAYLOAD_BYTES = 16 * KIB - 60  # a batch of 16 KiB, header included
SIZES = {"32 KiB": 32 * KIB, "1 MiB": 1024 * KIB}
SECRET = b"bench"
# The baseline reads as much as the transport may ask for at once.
RAW_RECEIVE_BYTES = 1024 * KIB


def _append_entries(batches_bytes: int) -> AppendEntries:
    rng = random.Random(batches_bytes)
    batches = []
    offset = 0
    while sum(map(len, batches)) < batches_bytes:
        batch = build_batch(rng.randbytes(BATCH_PAYLOAD_BYTES), record_count=16)
        batches.append(with_offset_and_term(batch, offset, 7))
        offset += 16
    return AppendEntries(
        group=1,
        term=7,
        leader_id=1,
        prev_offset=offset - 1,
        prev_term=7,
        leader_commit=offset - 1,
        batches=b"".join(batches),
        flush=False,
    )


def _settings(quick: bool) -> tuple[int, int]:
    """(repetitions, frame bytes per repetition)."""
    return (9, 96 * MB) if quick else (21, 256 * MB)


# Enough messages per repetition that the small-message figures are not all clock noise.
CODEC_MESSAGES_MIN = 500


# --- codec --------------------------------------------------------------------------------


def _codec_rows(label: str, message: AppendEntries, repetitions: int, volume: int) -> list[dict]:
    frame = encode_frame(1, message)
    count = max(CODEC_MESSAGES_MIN, volume // len(frame))
    encode_s, decode_s = [], []
    for _ in range(repetitions):
        start = time.perf_counter()
        for correlation_id in range(1, count + 1):
            encode_frame_parts(correlation_id, message)
        encode_s.append(time.perf_counter() - start)
        decoder = FrameDecoder()
        start = time.perf_counter()
        for _ in range(count):
            decoder.feed(frame)
            decoder.next_frame()
        decode_s.append(time.perf_counter() - start)
    rows = []
    hows = {
        "encode": "frame pieces, batches not copied",
        "decode": "fed to FrameDecoder: copied in and out",
    }
    for direction, seconds in (("encode", encode_s), ("decode", decode_s)):
        elapsed = median(seconds)
        rows.append(
            {
                "figure": f"codec {direction} AppendEntries {label}",
                "how": hows[direction],
                "frame_bytes": len(frame),
                "messages_per_s": count / elapsed,
                "mb_per_s": count * len(frame) / elapsed / MB,
            }
        )
    return rows


# --- loopback -----------------------------------------------------------------------------


class _Sink:
    """The node's handler: counts AppendEntries and says when the expected number arrived."""

    def __init__(self) -> None:
        self.left = 0
        self.done = trio.Event()

    def expect(self, count: int) -> None:
        self.left = count
        self.done = trio.Event()

    async def __call__(self, peer, message) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()


async def _transport_seconds(connection, sink: _Sink, message: AppendEntries, count: int) -> float:
    sink.expect(count)
    start = time.perf_counter()
    for _ in range(count):
        await connection.send(message)
    await sink.done.wait()
    return time.perf_counter() - start


async def _raw_seconds(
    stream: trio.SocketStream, received: trio.MemoryReceiveChannel, data: bytes, count: int
) -> float:
    start = time.perf_counter()
    for _ in range(count):
        await stream.send_all(data)
    await received.receive()
    return time.perf_counter() - start


async def _count_bytes(
    stream: trio.SocketStream, expected: list[int], done: trio.MemorySendChannel
) -> None:
    """The baseline's receiving end: reads and counts, nothing else."""
    left = expected[0]
    while data := await stream.receive_some(RAW_RECEIVE_BYTES):
        left -= len(data)
        if left == 0:
            await done.send(None)
            left = expected[0]


async def _loopback_rows(
    label: str, message: AppendEntries, repetitions: int, volume: int
) -> list[dict]:
    frame = encode_frame(0, message)
    count = max(1, volume // len(frame))
    sink = _Sink()
    expected = [count * len(frame)]
    done_send, done_receive = trio.open_memory_channel(1)
    transport_s, raw_s = [], []
    # Both connections live through the whole run, as a peer link does, and are warmed up
    # (TCP windows, buffers) before anything is timed.
    async with (
        open_tcp_transport(1, "127.0.0.1:0", sink, rng=random.Random(1), secret=SECRET) as node,
        open_connection(node.listen_addresses[0], secret=SECRET) as connection,
        trio.open_nursery() as nursery,
    ):
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        nursery.start_soon(
            partial(
                trio.serve_listeners,
                partial(_count_bytes, expected=expected, done=done_send),
                [listener],
            )
        )
        raw = await trio.open_tcp_stream("127.0.0.1", listener.socket.getsockname()[1])
        await _transport_seconds(connection, sink, message, count)
        await _raw_seconds(raw, done_receive, frame, count)
        for _ in range(repetitions):  # alternate, so that a busy neighbour hurts both alike
            transport_s.append(await _transport_seconds(connection, sink, message, count))
            raw_s.append(await _raw_seconds(raw, done_receive, frame, count))
        await raw.aclose()
        nursery.cancel_scope.cancel()
    transport_mb_s = count * len(frame) / median(transport_s) / MB
    raw_mb_s = count * len(frame) / median(raw_s) / MB
    return [
        {
            "figure": f"loopback AppendEntries {label}",
            "how": "one-way on one connection vs raw socket",
            "frame_bytes": len(frame),
            "messages_per_s": count / median(transport_s),
            "mb_per_s": transport_mb_s,
            "raw_socket_mb_per_s": raw_mb_s,
            # Each repetition's pair ran back to back: the median of their ratios shrugs off
            # a neighbour's load better than a ratio of medians.
            "ratio": median(raw / ours for ours, raw in zip(transport_s, raw_s, strict=True)),
        }
    ]


def run(quick: bool = False) -> list[dict]:
    repetitions, volume = _settings(quick)
    register_raft_messages()
    messages = {label: _append_entries(size) for label, size in SIZES.items()}
    rows = []
    for label, message in messages.items():
        rows += _codec_rows(label, message, repetitions, volume)
    for label, message in messages.items():
        rows += trio.run(_loopback_rows, label, message, repetitions, volume)
    return rows


if __name__ == "__main__":
    # Connection events would drown the table.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    started = time.perf_counter()
    figures = run(quick="--quick" in sys.argv)
    print_table("transport", figures)
    print(f"{time.perf_counter() - started:.1f} s")
