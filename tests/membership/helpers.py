"""Shared by the membership tests: configurations to build and to draw from."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import strategies as st

from quorumlog.membership.config import Configuration, JointVoters, NodeId


def address(node_id: NodeId) -> str:
    return f"10.0.0.{node_id}:7001"


def simple(
    voters: Iterable[NodeId], learners: Iterable[NodeId] = (), version: int = 0
) -> Configuration:
    voters, learners = frozenset(voters), frozenset(learners)
    return Configuration(
        version=version,
        voters=voters,
        learners=learners,
        addresses={n: address(n) for n in voters | learners},
    )


def joint(
    old: Iterable[NodeId], new: Iterable[NodeId], learners: Iterable[NodeId] = (), version: int = 0
) -> Configuration:
    old, new, learners = frozenset(old), frozenset(new), frozenset(learners)
    return Configuration(
        version=version,
        voters=old | new,
        learners=learners,
        addresses={n: address(n) for n in old | new | learners},
        joint=JointVoters(old=old, new=new),
    )


NODE_IDS = st.integers(min_value=1, max_value=7)
VOTER_SETS = st.frozensets(NODE_IDS, min_size=1)


@st.composite
def configurations(draw: st.DrawFn) -> Configuration:
    """Simple or joint configurations over nodes 1..7, with learners among the rest."""
    if draw(st.booleans()):
        old, new = draw(VOTER_SETS), draw(VOTER_SETS)
        learners = draw(st.frozensets(NODE_IDS)) - old - new
        return joint(old, new, learners)
    voters = draw(VOTER_SETS)
    return simple(voters, draw(st.frozensets(NODE_IDS)) - voters)
