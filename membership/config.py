"""The cluster configuration: who votes, who only learns, and where each member listens.

Besides voters and learners, Kudu's roles of its seed (appendix "add a new member before it
has copied all data"): a witness votes and counts for commit but never stands for election
(logging and voting, not electable: "LV"); a log-only member is a voter demoted to a learner
that the leader does not promote by itself ("L"), kept so that it can come back cheaply.

A configuration is a value: it is replaced, never mutated (`membership.changes` builds the
next one). It lives in config batches in the log and takes effect on append (Raft
dissertation 4.1, seed 000 "applies the configuration change in-memory"); the actors keep
the last committed one in the consensus metadata file too.

In a joint configuration C(old,new) every decision needs a majority of `joint.old` and a
majority of `joint.new` (seed 001, "separate majorities from both"); `voters` is then the
union of both halves, every node that casts a vote somewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

NodeId = int

NODE_ID_MAX = 2**63 - 1  # node ids and versions travel as msgpack int64
VERSION_MAX = 2**63 - 1
MEMBERS_MAX = 64  # voters and learners together, both halves of a joint configuration
ADDRESS_CHARS_MAX = 262  # a 253-character DNS name in brackets, ":" and a 5-digit port
PORT_MAX = 65535

_WIRE_KEYS = frozenset(
    {"version", "voters", "learners", "learners_to_promote", "joint", "addresses"}
)
# Keys a configuration written before witnesses existed does not have.
_WIRE_KEYS_OPTIONAL = frozenset({"witnesses", "log_only"})


class InvalidConfigurationError(ValueError):
    """A configuration breaks an invariant, or its wire form is malformed."""


@dataclass(frozen=True, slots=True)
class JointVoters:
    """The two voter sets of C(old,new); each must supply its own majority."""

    old: frozenset[NodeId]
    new: frozenset[NodeId]


@dataclass(frozen=True, slots=True)
class Configuration:
    # Increases by one with every change, so "appended but not committed" is a version
    # comparison (see `membership.changes.check_can_change`).
    version: int
    # Every node with a vote. Invariant: non-empty; in a joint configuration exactly
    # joint.old | joint.new.
    voters: frozenset[NodeId]
    # Receive the log, never count toward a majority. Invariant: disjoint from voters.
    learners: frozenset[NodeId]
    # host:port of every member. Invariant: keys are exactly voters | learners, values unique.
    addresses: Mapping[NodeId, str] = field(hash=False)
    # Learners the leader promotes by itself once caught up (Kudu's PRE_FOLLOWER with the
    # `promote` attribute). The other learners are staged for a joint change and wait for
    # it: promoting them one by one would take the path seed 001 warns against.
    # Invariant: a subset of learners.
    learners_to_promote: frozenset[NodeId] = frozenset()
    joint: JointVoters | None = None
    # Vote and count for commit, never campaign nor take a transfer. A learner added with
    # `--witness` is one already and stays one once promoted. Invariant: a subset of
    # voters | learners_to_promote, and some voter is not a witness.
    witnesses: frozenset[NodeId] = frozenset()
    # Voters demoted to learners (`members demote`); promoted again only when asked.
    # Invariant: a subset of learners, disjoint from learners_to_promote.
    log_only: frozenset[NodeId] = frozenset()

    def __post_init__(self) -> None:
        # Copy what the caller passed, so that nobody can change a configuration under us.
        object.__setattr__(self, "voters", frozenset(self.voters))
        object.__setattr__(self, "learners", frozenset(self.learners))
        object.__setattr__(self, "learners_to_promote", frozenset(self.learners_to_promote))
        object.__setattr__(self, "witnesses", frozenset(self.witnesses))
        object.__setattr__(self, "log_only", frozenset(self.log_only))
        object.__setattr__(self, "addresses", MappingProxyType(dict(self.addresses)))
        if self.joint is not None:
            joint = JointVoters(old=frozenset(self.joint.old), new=frozenset(self.joint.new))
            object.__setattr__(self, "joint", joint)
        _check_invariants(self)

    @classmethod
    def bootstrap(cls, addresses: Mapping[NodeId, str]) -> Configuration:
        """The first configuration of a new cluster: every node given is a voter."""
        return cls(
            version=0, voters=frozenset(addresses), learners=frozenset(), addresses=addresses
        )

    @property
    def is_joint(self) -> bool:
        return self.joint is not None

    @property
    def members(self) -> frozenset[NodeId]:
        return self.voters | self.learners

    @property
    def voter_sets(self) -> tuple[frozenset[NodeId], ...]:
        """The voter sets that must each supply a majority: one, or old and new when joint."""
        if self.joint is None:
            return (self.voters,)
        return (self.joint.old, self.joint.new)

    def is_voter(self, node_id: NodeId) -> bool:
        return node_id in self.voters

    def is_learner(self, node_id: NodeId) -> bool:
        return node_id in self.learners

    @property
    def electable(self) -> frozenset[NodeId]:
        """The voters that may campaign and take a transfer: all but the witnesses."""
        return self.voters - self.witnesses

    def can_lead(self, node_id: NodeId) -> bool:
        return node_id in self.voters and node_id not in self.witnesses

    def to_json(self) -> dict[str, Any]:
        """The `config` object of `quorumlog status --json` (docs/cli.md)."""
        return {
            "voters": sorted(self.voters),
            "learners": sorted(self.learners),
            "joint": self._joint_lists(),
            "witnesses": sorted(self.witnesses),
            "log_only": sorted(self.log_only),
        }

    def to_wire(self) -> dict[str, Any]:
        """Plain dicts, lists, ints and strings, with string keys only (msgpack's default)."""
        return {
            "version": self.version,
            "voters": sorted(self.voters),
            "learners": sorted(self.learners),
            "learners_to_promote": sorted(self.learners_to_promote),
            "joint": self._joint_lists(),
            "witnesses": sorted(self.witnesses),
            "log_only": sorted(self.log_only),
            "addresses": [[node_id, self.addresses[node_id]] for node_id in sorted(self.addresses)],
        }

    def _joint_lists(self) -> dict[str, list[NodeId]] | None:
        if self.joint is None:
            return None
        return {"old": sorted(self.joint.old), "new": sorted(self.joint.new)}

    @classmethod
    def from_wire(cls, wire: object) -> Configuration:
        """The inverse of `to_wire`; raises InvalidConfigurationError on anything malformed."""
        if not isinstance(wire, dict):
            raise InvalidConfigurationError(f"configuration must be a map, got {_kind(wire)}")
        if not _WIRE_KEYS <= set(wire) <= _WIRE_KEYS | _WIRE_KEYS_OPTIONAL:
            missing = ", ".join(sorted(_WIRE_KEYS - set(wire))) or "none"
            known = _WIRE_KEYS | _WIRE_KEYS_OPTIONAL
            unexpected = ", ".join(sorted(map(repr, set(wire) - known))) or "none"
            raise InvalidConfigurationError(
                f"configuration keys are wrong: missing {missing}; unexpected {unexpected}"
            )
        joint = wire["joint"]
        if joint is not None:
            if not isinstance(joint, dict) or set(joint) != {"old", "new"}:
                raise InvalidConfigurationError("joint must be null or a map with keys old and new")
            joint = JointVoters(
                old=_wire_node_ids(joint["old"], "joint.old"),
                new=_wire_node_ids(joint["new"], "joint.new"),
            )
        return cls(
            version=_bounded_int(wire["version"], "version", VERSION_MAX),
            voters=_wire_node_ids(wire["voters"], "voters"),
            learners=_wire_node_ids(wire["learners"], "learners"),
            learners_to_promote=_wire_node_ids(wire["learners_to_promote"], "learners_to_promote"),
            addresses=_wire_addresses(wire["addresses"]),
            joint=joint,
            witnesses=_wire_node_ids(wire.get("witnesses", []), "witnesses"),
            log_only=_wire_node_ids(wire.get("log_only", []), "log_only"),
        )


def check_node_id(node_id: object) -> NodeId:
    """Return a valid node id unchanged, or raise InvalidConfigurationError saying why."""
    return _bounded_int(node_id, "node id", NODE_ID_MAX)


def check_address(address: object) -> str:
    """Return a valid "host:port" unchanged, or raise InvalidConfigurationError saying why."""
    if not isinstance(address, str):
        raise InvalidConfigurationError(f"address must be a string, got {_kind(address)}")
    if len(address) > ADDRESS_CHARS_MAX:
        raise InvalidConfigurationError(f"address is longer than {ADDRESS_CHARS_MAX} characters")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or port.startswith("0"):
        raise InvalidConfigurationError(f"address {address!r} is not HOST:PORT")
    if not 1 <= int(port) <= PORT_MAX:
        raise InvalidConfigurationError(f"address {address!r} has port outside 1..{PORT_MAX}")
    bracketed = host.startswith("[") and host.endswith("]")  # an IPv6 literal
    if any(c.isspace() for c in host) or (":" in host and not bracketed):
        raise InvalidConfigurationError(f"address {address!r} has an invalid host")
    return address


def _check_invariants(config: Configuration) -> None:
    _bounded_int(config.version, "version", VERSION_MAX)
    for node_id in config.voters | config.learners:
        check_node_id(node_id)
    if not config.voters:
        raise InvalidConfigurationError("a configuration needs at least one voter")
    if overlap := config.voters & config.learners:
        raise InvalidConfigurationError(f"nodes {sorted(overlap)} are both voter and learner")
    if stray := config.learners_to_promote - config.learners:
        raise InvalidConfigurationError(
            f"nodes {sorted(stray)} are to be promoted but not learners"
        )
    if stray := config.witnesses - config.voters - config.learners_to_promote:
        raise InvalidConfigurationError(
            f"nodes {sorted(stray)} are witnesses but neither voters nor learners to promote"
        )
    if not config.electable:
        raise InvalidConfigurationError("a configuration needs a voter that is not a witness")
    if stray := config.log_only - (config.learners - config.learners_to_promote):
        raise InvalidConfigurationError(
            f"nodes {sorted(stray)} are log-only but not learners left unpromoted"
        )
    if len(config.members) > MEMBERS_MAX:
        raise InvalidConfigurationError(f"a configuration has at most {MEMBERS_MAX} members")
    if config.joint is not None:
        if not config.joint.old or not config.joint.new:
            raise InvalidConfigurationError("both halves of a joint configuration need a voter")
        if config.joint.old | config.joint.new != config.voters:
            raise InvalidConfigurationError("in a joint configuration voters must be old | new")
    if set(config.addresses) != config.members:
        raise InvalidConfigurationError(
            f"addresses must cover exactly the members {sorted(config.members)}, "
            f"got {sorted(config.addresses, key=repr)}"
        )
    for address in config.addresses.values():
        check_address(address)
    if len(set(config.addresses.values())) != len(config.addresses):
        raise InvalidConfigurationError("two members have the same address")


def _kind(value: object) -> str:
    return type(value).__name__


def _bounded_int(value: object, what: str, maximum: int) -> int:
    # bool is an int subclass; a True where a node id belongs is a bug, not node 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidConfigurationError(f"{what} must be an integer, got {_kind(value)}")
    if not 0 <= value <= maximum:
        raise InvalidConfigurationError(f"{what} {value} is outside 0..{maximum}")
    return value


def _wire_list(value: object, what: str) -> list | tuple:
    # msgpack decodes arrays as lists, or tuples with use_list=False.
    if not isinstance(value, list | tuple):
        raise InvalidConfigurationError(f"{what} must be a list, got {_kind(value)}")
    if len(value) > MEMBERS_MAX:
        raise InvalidConfigurationError(f"{what} has more than {MEMBERS_MAX} entries")
    return value


def _wire_node_ids(value: object, what: str) -> frozenset[NodeId]:
    items = _wire_list(value, what)
    node_ids = frozenset(_bounded_int(item, f"node id in {what}", NODE_ID_MAX) for item in items)
    if len(node_ids) != len(items):
        raise InvalidConfigurationError(f"{what} lists a node twice")
    return node_ids


def _wire_addresses(value: object) -> dict[NodeId, str]:
    addresses: dict[NodeId, str] = {}
    for pair in _wire_list(value, "addresses"):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise InvalidConfigurationError("each address must be a [node id, address] pair")
        node_id = _bounded_int(pair[0], "node id in addresses", NODE_ID_MAX)
        if node_id in addresses:
            raise InvalidConfigurationError(f"addresses lists node {node_id} twice")
        addresses[node_id] = check_address(pair[1])
    return addresses
