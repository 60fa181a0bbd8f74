"""Ids as Kafka has them: 16 bytes (a UUID), written as 22 characters of URL-safe base64
without padding. A topic's id is random, chosen by the controller's leader when it creates
the topic and kept in the controller's log with it (`CreateTopic.topic_id`); a topic made
before ids (its CreateTopic has none) and the genesis topic `default` get one derived from
the controller offset that made them, which every node applies alike, at every replay.
The cluster's Kafka id is derived from quorumlog's own cluster id (`status --json`).

As Kafka's `Uuid.randomUuid`, no id is 0 or 1 (reserved there) or written starting with
'-' (a command line would take it for an option).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import random
import uuid

_RESERVED = (0, 1)


def new_topic_id(rng: random.Random) -> str:
    """A random topic id (version 4 UUID, as text)."""
    while True:
        found = uuid.UUID(int=rng.getrandbits(128), version=4)
        if _usable(found):
            return str(found)


def derived_topic_id(name: str, created_offset: int) -> str:
    """The id of a topic whose create carried none: the same on every node."""
    return str(_derived(f"topic {name} {created_offset}"))


def kafka_cluster_id(cluster_id: str) -> str:
    """quorumlog's cluster id as a Kafka cluster id."""
    return kafka_text(_derived(f"cluster {cluster_id}"))


def kafka_text(value: uuid.UUID) -> str:
    """Kafka's text of an id (`Uuid.toString`)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _derived(seed: str) -> uuid.UUID:
    for attempt in itertools.count():
        digest = hashlib.sha256(f"{seed} {attempt}".encode()).digest()
        found = uuid.UUID(bytes=digest[:16], version=4)
        if _usable(found):
            return found
    raise AssertionError("unreachable")


def _usable(value: uuid.UUID) -> bool:
    return value.int not in _RESERVED and not kafka_text(value).startswith("-")
