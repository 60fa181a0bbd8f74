"""The Python API's edges that need no cluster (issue 44): the brokers checked once with one
clear error, Kafka's acks name, the per-record partitioner, refusals as their own classes."""

from __future__ import annotations

import pytest

import quorumlog
from quorumlog import AsyncClient, Client, QuorumLogError
from quorumlog.client.partitioner import murmur2, partition_of_key, spread
from quorumlog.client.protocol import parse_acks, parse_brokers
from quorumlog.client.routing import error_from
from quorumlog.transport.messages import Acks, ErrorCode, ErrorReply


@pytest.mark.parametrize(
    ("brokers", "error", "shown"),
    [
        ([7001], TypeError, "7001"),
        (7001, TypeError, "7001"),
        (None, TypeError, "None"),
        (b"127.0.0.1:7001", TypeError, "b'127.0.0.1:7001'"),
        (["127.0.0.1:7001", 7002], TypeError, "7002"),
        ("127.0.0.1", ValueError, "'127.0.0.1'"),
        (["127.0.0.1:7001", "localhost"], ValueError, "'localhost'"),
        ("127.0.0.1:x", ValueError, "'127.0.0.1:x'"),
        ("", ValueError, "no brokers"),
        ([], ValueError, "no brokers"),
    ],
)
def test_bad_brokers_get_one_clear_error_showing_what_was_given(brokers, error, shown):
    for make in (Client, AsyncClient):
        with pytest.raises(error) as raised:
            make(brokers)
        message = str(raised.value)
        assert shown in message, message
        assert "HOST:PORT" in message, "what is expected"


def test_brokers_as_text_or_any_iterable_of_text():
    assert parse_brokers(" 127.0.0.1:7001 ,[::1]:7002,") == ["127.0.0.1:7001", "[::1]:7002"]
    assert parse_brokers(("a:1", "b:2")) == ["a:1", "b:2"]
    assert parse_brokers(b for b in ["a:1"]) == ["a:1"]


def test_acks_all_is_kafkas_name_for_quorum():
    assert parse_acks("all") is parse_acks("quorum") is Acks.QUORUM
    with pytest.raises(QuorumLogError, match="quorum, all, leader, none"):
        parse_acks("sometimes")


def test_spread_places_keyed_records_by_their_own_key_and_unkeyed_ones_in_turn():
    keys = [None, b"user-1", None, None, b"user-2", None]
    partitions, turn = spread(keys, 3, 5)
    assert partitions == [
        2,
        partition_of_key(b"user-1", 3),
        0,
        1,
        partition_of_key(b"user-2", 3),
        2,
    ]
    assert turn == 9
    # Keyed placement unchanged: Kafka's murmur2 (its UtilsTest vectors).
    assert (murmur2(b"21"), murmur2(b"foobar")) == (-973932308, -790332482)


def test_refusals_a_program_acts_on_are_their_own_classes_with_the_same_text():
    cases = {
        "topic 'events' exists": quorumlog.TopicExistsError,
        "unknown group 'billing'": quorumlog.UnknownGroupError,
        "group 'billing' has active members: stop them first": quorumlog.GroupActiveError,
        "group 'billing' has active members consuming events": quorumlog.GroupActiveError,
        "group 'billing' has 2 active member(s): stop them first": quorumlog.GroupActiveError,
        "group 'billing' has 1 active Kafka member(s): stop them first": (
            quorumlog.GroupActiveError
        ),
        "bad topic name 'a/b': use only letters, digits, '.', '_' and '-'": (
            quorumlog.RefusedError
        ),
    }
    for message, kind in cases.items():
        error = error_from(ErrorReply(ErrorCode.REFUSED, message))
        assert type(error) is kind, message
        assert isinstance(error, quorumlog.RefusedError | QuorumLogError)
        assert str(error) == f"refused: {message}", "the text as before"
    assert issubclass(quorumlog.TopicExistsError, QuorumLogError)


def test_a_topic_passed_where_end_offset_takes_linearizable_is_named():
    """end_offset's first argument is `linearizable` (start_offset's is the topic): a topic
    there would go to the server as a flag and come back as a protocol error."""
    refused = pytest.raises(TypeError, match=r"linearizable, a bool, not str.*end_offset\(topic")
    with Client("127.0.0.1:1", timeout=0.5) as client, refused:
        client.end_offset("events")
