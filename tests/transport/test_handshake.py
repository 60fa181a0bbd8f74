"""The handshake over in-memory streams: every pairing of secrets, and a rogue dialler."""

import pytest
import trio
import trio.testing

from quorumlog.transport import auth
from quorumlog.transport.codec import encode_frame
from quorumlog.transport.errors import AuthError, ConnectionClosed, ProtocolError, WrongClusterError
from quorumlog.transport.framing import FrameDecoder
from quorumlog.transport.handshake import PROTOCOL_VERSION, dial_handshake, listen_handshake
from quorumlog.transport.identity import ClusterIdentity
from quorumlog.transport.messages import Challenge, ErrorCode, ErrorReply, Hello, Proof, Role
from quorumlog.transport.network import ConnectionInfo


async def shake(
    dialler_secret, listener_secret, *, role=Role.PEER, node_id=2, identities=(None, None)
):
    dialler_stream, listener_stream = trio.testing.memory_stream_pair()
    outcome = {}

    async def side(name, stream, run):
        try:
            outcome[name] = await run()
        except (AuthError, ConnectionClosed, ProtocolError) as exc:
            outcome[name] = exc
            await stream.aclose()  # as a real socket closes when its side gives up

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                side,
                "dialler",
                dialler_stream,
                lambda: dial_handshake(
                    dialler_stream,
                    FrameDecoder(),
                    role=role,
                    node_id=node_id,
                    secret=dialler_secret,
                    remote="listener",
                    identity=identities[0],
                ),
            )
            nursery.start_soon(
                side,
                "listener",
                listener_stream,
                lambda: listen_handshake(
                    listener_stream,
                    FrameDecoder(),
                    node_id=1,
                    secret=listener_secret,
                    remote="dialler",
                    identity=identities[1],
                ),
            )
    return outcome["dialler"], outcome["listener"]


@pytest.mark.parametrize("secret", [None, b"s3cret"])
async def test_matching_secrets_connect_and_say_who_is_who(secret):
    dialler, listener = await shake(secret, secret)
    assert dialler == ConnectionInfo(role=Role.PEER, node_id=1, remote="listener")
    assert listener == ConnectionInfo(role=Role.PEER, node_id=2, remote="dialler")


async def test_client_has_no_node_id():
    _, listener = await shake(None, None, role=Role.CLIENT, node_id=None)
    assert listener.role is Role.CLIENT and listener.node_id is None


@pytest.mark.parametrize(
    "dialler_secret, listener_secret, dialler_says, listener_says",
    [
        (b"one", b"two", "wrong secret", "wrong secret"),
        (None, b"two", "missing secret", "missing secret"),
        (b"one", None, "missing secret", "missing secret"),
    ],
)
async def test_mismatched_secrets_fail_on_both_sides(
    dialler_secret, listener_secret, dialler_says, listener_says
):
    dialler, listener = await shake(dialler_secret, listener_secret)
    assert isinstance(dialler, AuthError) and dialler_says in str(dialler)
    assert isinstance(listener, AuthError) and listener_says in str(listener)


async def test_peer_without_node_id_is_a_protocol_error():
    dialler, listener = await shake(None, None, role=Role.PEER, node_id=None)
    assert isinstance(listener, ProtocolError)
    assert isinstance(dialler, ConnectionClosed) and "a peer must give its node id" in str(dialler)


async def test_rogue_dialler_with_a_made_up_proof_is_refused():
    dialler_stream, listener_stream = trio.testing.memory_stream_pair()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def listen():
                with pytest.raises(AuthError, match="proof does not match"):
                    await listen_handshake(
                        listener_stream, FrameDecoder(), node_id=1, secret=b"s", remote="rogue"
                    )

            nursery.start_soon(listen)
            decoder = FrameDecoder()
            hello = Hello(PROTOCOL_VERSION, Role.CLIENT, None, auth.new_nonce())
            await dialler_stream.send_all(encode_frame(0, hello))
            while (frame := decoder.next_frame()) is None:
                decoder.feed(await dialler_stream.receive_some())
            assert isinstance(frame.message, Challenge)
            await dialler_stream.send_all(encode_frame(0, Proof(b"\x00" * 32)))
            while (frame := decoder.next_frame()) is None:
                decoder.feed(await dialler_stream.receive_some())
            assert frame.message.code is ErrorCode.AUTH


async def test_replayed_proof_from_another_connection_is_refused():
    """A proof binds both nonces, so one recorded earlier is worthless."""
    secret = b"s"
    old_hello = Hello(PROTOCOL_VERSION, Role.CLIENT, None, auth.new_nonce())
    old_challenge = Challenge(1, auth.new_nonce(), b"")
    recorded = auth.dialler_proof(secret, old_hello, old_challenge)
    new_challenge = Challenge(1, auth.new_nonce(), b"")
    assert auth.dialler_proof_problem(secret, old_hello, new_challenge, recorded) is not None
    # and a listener's proof is not a dialler's proof (no reflection)
    reflected = auth.listener_proof(secret, old_hello, 1, old_challenge.nonce)
    assert auth.dialler_proof_problem(secret, old_hello, old_challenge, reflected) is not None
    assert auth.dialler_proof_problem(secret, old_hello, old_challenge, recorded) is None


async def test_listener_refusal_reaches_the_dialler_as_connection_closed():
    dialler_stream, listener_stream = trio.testing.memory_stream_pair()
    await listener_stream.send_all(encode_frame(0, ErrorReply(ErrorCode.REFUSED, "full")))
    with pytest.raises(ConnectionClosed, match=r"refused \(refused\): full"):
        await dial_handshake(
            dialler_stream, FrameDecoder(), role=Role.CLIENT, node_id=None, secret=None, remote="x"
        )


@pytest.mark.parametrize("secret", [None, b"s3cret"])
async def test_nodes_of_different_clusters_refuse_each_other_on_both_sides(secret):
    dialler_cluster, listener_cluster = ClusterIdentity("aaaa"), ClusterIdentity("bbbb")
    dialler, listener = await shake(secret, secret, identities=(dialler_cluster, listener_cluster))
    assert isinstance(dialler, WrongClusterError) and isinstance(listener, WrongClusterError)
    assert "node 1 is of cluster bbbb, not of this node's aaaa" in str(dialler)
    assert "node 2 is of cluster aaaa, not of this node's bbbb" in str(listener)
    assert dialler_cluster.foreign == {1: "bbbb"}
    assert listener_cluster.foreign == {2: "aaaa"}


@pytest.mark.parametrize("ids", [("aaaa", "aaaa"), (None, "aaaa"), ("aaaa", None)])
async def test_the_same_cluster_or_a_node_without_an_id_connects(ids):
    identities = tuple(ClusterIdentity(cluster_id) for cluster_id in ids)
    dialler, listener = await shake(None, None, identities=identities)
    assert dialler == ConnectionInfo(role=Role.PEER, node_id=1, remote="listener")
    assert listener == ConnectionInfo(role=Role.PEER, node_id=2, remote="dialler")
    assert not identities[0].foreign and not identities[1].foreign


async def test_a_client_states_no_cluster_and_is_served_by_any():
    dialler, listener = await shake(
        None, None, role=Role.CLIENT, node_id=None, identities=(None, ClusterIdentity("bbbb"))
    )
    assert dialler == ConnectionInfo(role=Role.PEER, node_id=1, remote="listener")
    assert listener == ConnectionInfo(role=Role.CLIENT, node_id=None, remote="dialler")


async def test_a_dialler_without_the_secret_cannot_make_a_node_note_it_foreign():
    listener_cluster = ClusterIdentity("bbbb")
    _, listener = await shake(
        b"wrong", b"s3cret", identities=(ClusterIdentity("aaaa"), listener_cluster)
    )
    assert isinstance(listener, AuthError)
    assert not listener_cluster.foreign
