"""The live listener over real TCP on 127.0.0.1: abuse, authentication, limits, TLS."""

import random
import shutil
import ssl
import subprocess

import pytest
import structlog
import trio

from quorumlog.transport.addresses import parse_address
from quorumlog.transport.codec import LENGTH_PREFIX, encode_frame
from quorumlog.transport.errors import AuthError, ConnectionClosed
from quorumlog.transport.framing import FrameDecoder, decode_frame
from quorumlog.transport.handshake import dial_handshake
from quorumlog.transport.messages import (
    ErrorCode,
    ErrorReply,
    Hello,
    ReadReply,
    ReadRequest,
    Role,
    StatusReply,
    StatusRequest,
)
from quorumlog.transport.network import Limits
from quorumlog.transport.tcp import open_connection, open_tcp_transport

SECRET = b"correct horse battery staple"
IDLE_CONNECTIONS = 200


async def echo(peer, message):
    match message:
        case ReadRequest(offset=offset):
            return ReadReply(b"echo", offset, 0)
        case StatusRequest():
            return StatusReply({"role": peer.role.name, "node_id": peer.node_id})
    return None


def listening(secret=SECRET, **limits):
    return open_tcp_transport(
        1, "127.0.0.1:0", echo, rng=random.Random(1), secret=secret, limits=Limits(**limits)
    )


async def raw_stream(address: str) -> trio.SocketStream:
    host, port = parse_address(address)
    return await trio.open_tcp_stream(host, port)


async def read_to_end(stream: trio.abc.Stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some():
        data += chunk
    return data


async def refusal_of(address: str, raw: bytes) -> ErrorReply:
    """Send raw bytes as a new connection; the listener answers with an error and closes."""
    stream = await raw_stream(address)
    await stream.send_all(raw)
    reply = decode_frame(await read_to_end(stream)).message
    await stream.aclose()
    assert isinstance(reply, ErrorReply)
    return reply


async def test_listener_survives_abuse_then_serves_a_correct_client():
    with trio.fail_after(30), structlog.testing.capture_logs() as logs:
        async with listening(handshake_timeout_s=2.0) as node:
            address = node.listen_addresses[0]

            garbage = await refusal_of(address, b"\x00\x00\x00\x05hello")
            assert garbage.code is ErrorCode.PROTOCOL and "msgpack" in garbage.message
            http = await refusal_of(address, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert http.code is ErrorCode.PROTOCOL and "frame_bytes_max" in http.message
            oversized = await refusal_of(address, LENGTH_PREFIX.pack(100 * 1024 * 1024))
            assert "frame_bytes_max" in oversized.message
            wrong_first = await refusal_of(address, encode_frame(0, StatusRequest()))
            assert "expected Hello" in wrong_first.message

            half = await raw_stream(address)  # half a Hello, then hang up
            await half.send_all(encode_frame(0, Hello(1, Role.CLIENT, None, b"n" * 32))[:9])
            await half.aclose()

            with pytest.raises(AuthError, match="wrong secret"):
                async with open_connection(address, secret=b"wrong"):
                    pass
            with pytest.raises(AuthError, match="missing secret: the node requires one"):
                async with open_connection(address, secret=None):
                    pass

            # A good handshake followed by a bad frame: only that connection closes.
            stream = await raw_stream(address)
            await dial_handshake(
                stream,
                FrameDecoder(),
                role=Role.CLIENT,
                node_id=None,
                secret=SECRET,
                remote=address,
            )
            await stream.send_all(b"\x00\x00\x00\x02\x91\xc1")
            assert await read_to_end(stream) == b""

            idle = [await raw_stream(address) for _ in range(IDLE_CONNECTIONS)]
            half_idle = await raw_stream(address)
            await half_idle.send_all(encode_frame(0, StatusRequest())[:5])

            async with open_connection(address, secret=SECRET) as client:
                assert await client.request(StatusRequest()) == StatusReply(
                    {"role": "CLIENT", "node_id": None}
                )
                assert await client.request(ReadRequest(42, 10)) == ReadReply(b"echo", 42, 0)

            # Silent connections are let go after the handshake timeout.
            with trio.fail_after(5):
                for stream in [*idle, half_idle]:
                    assert await read_to_end(stream) == b""
                    await stream.aclose()

    events = [(entry["log_level"], entry["event"], entry.get("reason", "")) for entry in logs]
    refusals = [e[2] for e in events if e[1] == "auth_failed"]
    assert any("wrong secret" in reason for reason in refusals)
    assert any("missing secret" in reason for reason in refusals)
    assert any(e[1] == "protocol_error" for e in events)
    assert (
        sum(1 for e in events if e[1] == "handshake_failed" and "no handshake within" in e[2])
        >= IDLE_CONNECTIONS
    )


async def test_client_with_a_secret_refuses_a_node_without_one():
    with trio.fail_after(10), structlog.testing.capture_logs() as logs:
        async with listening(secret=None) as node:
            with pytest.raises(
                AuthError, match="missing secret: the node has no secret configured"
            ):
                async with open_connection(node.listen_addresses[0], secret=SECRET):
                    pass
            async with open_connection(node.listen_addresses[0]) as client:
                assert isinstance(await client.request(StatusRequest()), StatusReply)
    assert any(entry["event"] == "auth_failed" for entry in logs)


async def test_connections_max_refuses_with_a_reason():
    with trio.fail_after(10):
        async with listening(connections_max=2) as node:
            address = node.listen_addresses[0]
            held = [await raw_stream(address) for _ in range(2)]
            await trio.sleep(0.2)  # let the listener accept them
            with pytest.raises(ConnectionClosed, match="connections_max 2 reached"):
                async with open_connection(address, secret=SECRET):
                    pass
            for stream in held:
                await stream.aclose()
            await trio.sleep(0.2)
            async with open_connection(address, secret=SECRET) as client:
                assert isinstance(await client.request(StatusRequest()), StatusReply)


async def test_unreachable_node_is_a_connection_closed():
    with trio.fail_after(10):
        async with listening() as node:
            address = node.listen_addresses[0]
        with pytest.raises(ConnectionClosed, match="cannot connect"):
            async with open_connection(address, secret=SECRET):
                pass


@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("127.0.0.1", False)])
async def test_warns_loudly_without_a_secret_off_loopback(host, warned):
    with trio.fail_after(10), structlog.testing.capture_logs() as logs:
        async with open_tcp_transport(1, f"{host}:0", echo, rng=random.Random(1)):
            pass
    warnings = [e for e in logs if e["event"] == "listening_without_secret"]
    assert bool(warnings) is warned
    if warned:
        assert warnings[0]["log_level"] == "warning"


@pytest.fixture(scope="module")
def tls_contexts(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    command = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    command += f" -keyout {key} -out {cert} -days 2 -subj /CN=quorumlog-test"
    command += " -addext subjectAltName=IP:127.0.0.1"
    subprocess.run(
        command.split(),
        check=True,
        capture_output=True,
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


async def test_tls_for_clients_and_peers(tls_contexts):
    server_context, client_context = tls_contexts
    inbox = trio.Event()

    async def peer_handler(peer, message):
        inbox.set()
        return StatusReply({"from": peer.node_id})

    with trio.fail_after(15):
        async with open_tcp_transport(
            1,
            "127.0.0.1:0",
            peer_handler,
            rng=random.Random(1),
            secret=SECRET,
            ssl_context=server_context,
        ) as node:
            address = node.listen_addresses[0]
            async with open_connection(
                address, secret=SECRET, ssl_context=client_context
            ) as client:
                assert await client.request(StatusRequest()) == StatusReply({"from": None})
            with pytest.raises(ConnectionClosed):  # plain TCP to a TLS port
                async with open_connection(
                    address, secret=SECRET, limits=Limits(handshake_timeout_s=1)
                ):
                    pass
            async with open_tcp_transport(
                2,
                "127.0.0.1:0",
                echo,
                rng=random.Random(2),
                peers={1: address},
                secret=SECRET,
                peer_ssl_context=client_context,
            ) as other:
                while not other.connected(1):
                    await trio.sleep(0.01)
                assert await other.request(1, StatusRequest()) == StatusReply({"from": 2})
