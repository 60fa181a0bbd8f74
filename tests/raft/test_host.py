"""The core is what its parts take it for (raft/host.py `CoreHost`): a name the protocol lists
and the core lacks would fail only on the path that uses it."""

from __future__ import annotations

from quorumlog.raft.host import CoreHost
from tests.raft.helpers import elect, make_core


def _listed() -> set[str]:
    names = set(CoreHost.__annotations__)
    for name, value in vars(CoreHost).items():
        if not name.startswith("_") and (callable(value) or isinstance(value, property)):
            names.add(name)
    return names


def test_the_core_offers_every_name_its_parts_use():
    listed = _listed()
    assert {"log", "term", "send", "commit_to", "become_follower"} <= listed
    core = make_core(1)
    elect(core)
    assert sorted(name for name in listed if not hasattr(core, name)) == []
