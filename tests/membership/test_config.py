"""The configuration value: invariants, helpers, status JSON and the wire form."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
from hypothesis import given

from quorumlog.membership.config import (
    MEMBERS_MAX,
    Configuration,
    InvalidConfigurationError,
    JointVoters,
    check_address,
)
from tests.membership.helpers import address, configurations, joint, simple


def test_bootstrap_makes_every_node_a_voter():
    config = Configuration.bootstrap({1: "a:7001", 2: "b:7001", 3: "c:7001"})
    assert config.version == 0
    assert config.voters == {1, 2, 3}
    assert config.learners == frozenset()
    assert not config.is_joint
    assert config.voter_sets == ({1, 2, 3},)


def test_helpers_of_a_simple_configuration():
    config = simple([1, 2, 3], learners=[4])
    assert config.members == {1, 2, 3, 4}
    assert config.is_voter(1) and not config.is_learner(1)
    assert config.is_learner(4) and not config.is_voter(4)
    assert not config.is_voter(5) and not config.is_learner(5)


def test_helpers_of_a_joint_configuration():
    config = joint(old=[1, 2, 3], new=[2, 3, 4], learners=[5])
    assert config.is_joint
    assert config.voters == {1, 2, 3, 4}
    assert config.voter_sets == ({1, 2, 3}, {2, 3, 4})
    assert config.is_voter(1) and config.is_voter(4)  # each votes in one half
    assert config.members == {1, 2, 3, 4, 5}


def test_to_json_matches_the_status_contract():
    assert simple([3, 1, 2], learners=[4]).to_json() == {
        "voters": [1, 2, 3],
        "learners": [4],
        "joint": None,
        "witnesses": [],
        "log_only": [],
    }
    assert joint(old=[1, 2, 3], new=[2, 3, 4]).to_json() == {
        "voters": [1, 2, 3, 4],
        "learners": [],
        "joint": {"old": [1, 2, 3], "new": [2, 3, 4]},
        "witnesses": [],
        "log_only": [],
    }


def test_a_configuration_written_before_witnesses_existed_still_reads():
    wire = simple([1, 2, 3]).to_wire()
    del wire["witnesses"], wire["log_only"]
    assert Configuration.from_wire(wire) == simple([1, 2, 3])


def test_witness_and_log_only_invariants():
    base = simple([1, 2, 3], learners=[4])
    with pytest.raises(InvalidConfigurationError, match="not a witness"):
        dataclasses.replace(base, witnesses={1, 2, 3})
    with pytest.raises(InvalidConfigurationError, match="witnesses but neither"):
        dataclasses.replace(base, witnesses={4})
    with pytest.raises(InvalidConfigurationError, match="log-only but not"):
        dataclasses.replace(base, log_only={1})
    config = dataclasses.replace(base, witnesses={3}, log_only={4})
    assert config.electable == {1, 2} and not config.can_lead(3) and config.can_lead(1)
    assert Configuration.from_wire(config.to_wire()) == config


def test_a_configuration_cannot_be_changed_through_what_built_it():
    addresses = {1: address(1)}
    voters = {1}
    config = Configuration(version=0, voters=voters, learners=set(), addresses=addresses)
    addresses[2] = address(2)
    voters.add(2)
    assert config.voters == {1} and dict(config.addresses) == {1: address(1)}
    with pytest.raises(TypeError):
        config.addresses[2] = address(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.version = 1


def test_configurations_are_values():
    assert simple([1, 2]) == simple([2, 1])
    assert hash(simple([1, 2])) == hash(simple([2, 1]))
    assert simple([1, 2]) != simple([1, 2], version=1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"voters": set(), "addresses": {}}, "at least one voter"),
        ({"learners": {1}}, "both voter and learner"),
        ({"learners_to_promote": {9}}, "to be promoted but not learners"),
        ({"addresses": {1: "a:1"}}, "addresses must cover exactly"),
        ({"addresses": {1: "a:1", 2: "a:1"}}, "same address"),
        ({"addresses": {1: "a:1", 2: "nonsense"}}, "is not HOST:PORT"),
        ({"version": -1}, "version -1 is outside"),
        ({"version": True}, "version must be an integer"),
        ({"voters": {1, -2}, "addresses": {1: "a:1", -2: "b:1"}}, "node id -2 is outside"),
        ({"joint": JointVoters(old=frozenset({1}), new=frozenset())}, "both halves"),
        (
            {"joint": JointVoters(old=frozenset({1}), new=frozenset({3}))},
            r"voters must be old \| new",
        ),
    ],
)
def test_invariants_are_enforced(fields, message):
    base = {
        "version": 0,
        "voters": {1, 2},
        "learners": set(),
        "addresses": {1: "a:1", 2: "b:1"},
    }
    with pytest.raises(InvalidConfigurationError, match=message):
        Configuration(**(base | fields))


def test_member_count_has_a_named_maximum():
    simple(range(1, MEMBERS_MAX + 1))
    with pytest.raises(InvalidConfigurationError, match="at most"):
        simple(range(1, MEMBERS_MAX + 2))


@pytest.mark.parametrize(
    "good", ["127.0.0.1:7001", "node-1.example.com:1", "[::1]:65535", "localhost:80"]
)
def test_good_addresses(good):
    assert check_address(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "7001",
        ":7001",
        "host:",
        "host:0",
        "host:65536",
        "host:07001",
        "host:+1",
        "h st:1",
        "::1:7001",
        "host:port",
        7001,
        None,
        "h" * 300 + ":1",
    ],
)
def test_bad_addresses(bad):
    with pytest.raises(InvalidConfigurationError):
        check_address(bad)


# --- wire form ---------------------------------------------------------------------------


@given(configurations())
def test_wire_round_trip(config):
    assert Configuration.from_wire(config.to_wire()) == config


@given(configurations())
def test_wire_form_survives_msgpack_with_default_options(config):
    packed = msgpack.packb(config.to_wire())
    assert Configuration.from_wire(msgpack.unpackb(packed)) == config
    assert Configuration.from_wire(msgpack.unpackb(packed, use_list=False)) == config


def test_wire_form_is_plain_data():
    wire = joint(old=[1, 2], new=[2, 3], learners=[4]).to_wire()
    assert wire == {
        "version": 0,
        "voters": [1, 2, 3],
        "learners": [4],
        "learners_to_promote": [],
        "joint": {"old": [1, 2], "new": [2, 3]},
        "witnesses": [],
        "log_only": [],
        "addresses": [[1, address(1)], [2, address(2)], [3, address(3)], [4, address(4)]],
    }


def _wire(**changed):
    return simple([1, 2, 3], learners=[4]).to_wire() | changed


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ([1, 2, 3], "must be a map, got list"),
        (None, "must be a map, got NoneType"),
        ({k: v for k, v in _wire().items() if k != "joint"}, "missing joint; unexpected none"),
        (_wire(extra=1), "missing none; unexpected 'extra'"),
        (_wire(version="1"), "version must be an integer, got str"),
        (_wire(version=-5), "version -5 is outside"),
        (_wire(version=2**63), "outside"),
        (_wire(voters="123"), "voters must be a list, got str"),
        (_wire(voters={1: 1}), "voters must be a list, got dict"),
        (_wire(voters=[1, 2, 2, 3]), "voters lists a node twice"),
        (_wire(voters=[1, 2, True]), "must be an integer, got bool"),
        (_wire(voters=[1, 2, 3.0]), "must be an integer, got float"),
        (_wire(voters=list(range(100))), "more than"),
        (_wire(voters=[]), "at least one voter"),
        (_wire(learners=[3]), "both voter and learner"),
        (_wire(learners_to_promote=[5]), "to be promoted but not learners"),
        (_wire(joint=[]), "joint must be null or a map"),
        (_wire(joint={"old": [1]}), "joint must be null or a map"),
        (_wire(joint={"old": [1, 2, 3], "new": "4"}), "joint.new must be a list"),
        (_wire(joint={"old": [1, 2, 3], "new": [2, 5]}), r"voters must be old \| new"),
        (_wire(addresses={1: "a:1"}), "addresses must be a list"),
        (_wire(addresses=[[1, "a:1", 5]]), r"\[node id, address\] pair"),
        (_wire(addresses=[1]), r"\[node id, address\] pair"),
        (_wire(addresses=[[1, "a:1"], [1, "b:1"]]), "lists node 1 twice"),
        (_wire(addresses=[[1, b"a:1"]]), "address must be a string, got bytes"),
        (_wire(addresses=[[1, "a:1"], [2, "b:1"], [3, "c:1"]]), "cover exactly"),
    ],
)
def test_malformed_wire_forms_are_refused_clearly(wire, message):
    with pytest.raises(InvalidConfigurationError, match=message):
        Configuration.from_wire(wire)


def test_wire_errors_are_value_errors():
    assert issubclass(InvalidConfigurationError, ValueError)
