"""Kafka's ids for topics and the cluster (controller/kafka_ids.py): a topic's id is chosen
once, kept in the controller's log, and is the same on every node and after every replay;
a topic from before ids gets one derived from where the log made it."""

from __future__ import annotations

import base64
import random
import uuid

import msgpack
import pytest

from quorumlog.controller.commands import CommandError, CreateTopic, DeleteTopic, from_wire, to_wire
from quorumlog.controller.kafka_ids import (
    derived_topic_id,
    kafka_cluster_id,
    kafka_text,
    new_topic_id,
)
from quorumlog.controller.state import DEFAULT_TOPIC, ClusterState
from tests.controller.test_state import cluster


def test_a_topic_keeps_the_id_its_create_carried_on_every_replay():
    topic_id = new_topic_id(random.Random(1))
    create = CreateTopic("events", ((1, 2, 3),), topic_id=topic_id)
    wire = msgpack.unpackb(msgpack.packb(to_wire(create)), raw=False)
    for state in (cluster(), cluster()):
        state.apply(from_wire(wire), 10)
        assert state.topics["events"].topic_id == topic_id


def test_a_topic_from_before_ids_gets_the_same_derived_id_everywhere():
    old_create = {"type": "CreateTopic", "name": "events", "replicas": [[1, 2, 3]]}
    ids = set()
    for _ in range(2):
        state = cluster()
        state.apply(from_wire(old_create), 10)
        ids.add(state.topics["events"].topic_id)
    assert ids == {derived_topic_id("events", 10)}
    # Made again (deleted, then created at another offset), it is another topic.
    state.apply(DeleteTopic("events"), 11)
    state.apply(from_wire(old_create), 12)
    assert state.topics["events"].topic_id not in ids
    assert ClusterState.genesis().topics[DEFAULT_TOPIC].topic_id == derived_topic_id(
        DEFAULT_TOPIC, 0
    )


def test_ids_are_version_4_uuids_that_kafka_would_make():
    rng = random.Random(7)
    made = [uuid.UUID(new_topic_id(rng)) for _ in range(2000)]
    made += [uuid.UUID(derived_topic_id(f"t{i}", i)) for i in range(2000)]
    assert len(set(made)) == len(made)
    for value in made:
        assert value.version == 4 and value.int not in (0, 1)
        assert not kafka_text(value).startswith("-")


def test_the_kafka_cluster_id_is_22_characters_of_url_safe_base64_of_16_bytes():
    text = kafka_cluster_id("3f2a9c0d41e7b865")
    assert len(text) == 22 and text == kafka_cluster_id("3f2a9c0d41e7b865")
    assert len(base64.urlsafe_b64decode(text + "==")) == 16
    assert text != kafka_cluster_id("3f2a9c0d41e7b866")


@pytest.mark.parametrize("topic_id", ["nope", 7, ["x"]])
def test_a_create_whose_id_is_not_a_uuid_is_refused(topic_id):
    wire = {"type": "CreateTopic", "name": "t", "replicas": [[1]], "topic_id": topic_id}
    with pytest.raises(CommandError, match="not a UUID"):
        from_wire(wire)
