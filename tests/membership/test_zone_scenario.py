"""Seed 001's example: why replace needs joint consensus.

Nodes A B C sit in zones 1 2 3; A is replaced by D, also in zone 1. One zone may fail at any
moment. One by one, the cluster passes through a configuration in which some single zone
failure leaves no quorum: add-then-remove ({A B C D}: zone 1 holds two of four voters) and
remove-then-add ({B C}: either zone holds half). Joint consensus never does: C(old,new) needs
a majority of {A B C} and of {B C D}, and one zone holds at most one node of each.
"""

from __future__ import annotations

from quorumlog.membership.changes import add_learner, promote, remove
from quorumlog.membership.config import Configuration
from quorumlog.membership.driver import plan_move, plan_replace
from quorumlog.membership.quorum import has_quorum
from tests.membership.plans import run_plan

A, B, C, D = 1, 2, 3, 4
ZONE_OF = {A: 1, B: 2, C: 3, D: 1}
ADDRESS_OF = {A: "a.zone1:7001", B: "b.zone2:7001", C: "c.zone3:7001", D: "d.zone1:7001"}
START = Configuration.bootstrap({n: ADDRESS_OF[n] for n in (A, B, C)})
LEADER = B


def zones_whose_failure_stalls(config: Configuration) -> set[int]:
    return {
        zone
        for zone in set(ZONE_OF.values())
        if not has_quorum(config, {n for n in config.members if ZONE_OF[n] != zone})
    }


def stalls_along(path: list[Configuration]) -> list[tuple[list, set[int]]]:
    """(voters, zones whose failure stalls) for each configuration that can stall."""
    return [
        (sorted(config.voters), zones)
        for config in path
        if (zones := zones_whose_failure_stalls(config))
    ]


def test_add_then_remove_stalls_when_zone_1_fails():
    path = run_plan(START, plan_move(START, A, D, ADDRESS_OF[D], LEADER))
    assert path[-1].voters == {B, C, D}
    assert stalls_along(path) == [([A, B, C, D], {1})]


def test_remove_then_add_stalls_when_zone_2_or_3_fails():
    removed = remove(START, A)
    added = add_learner(removed, D, ADDRESS_OF[D], promote=True)
    path = [START, removed, added, promote(added, D)]
    assert path[-1].voters == {B, C, D}
    assert stalls_along(path) == [([B, C], {2, 3}), ([B, C], {2, 3})]


def test_joint_replace_survives_any_one_zone_at_every_step():
    path = run_plan(START, plan_replace(START, A, D, ADDRESS_OF[D], LEADER))
    assert path[-1].voters == {B, C, D}
    assert any(config.is_joint for config in path)
    assert stalls_along(path) == []
