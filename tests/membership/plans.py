"""A plan executor at the configuration level, for the driver and zone tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

from quorumlog.membership import changes
from quorumlog.membership.config import Configuration
from quorumlog.membership.driver import (
    AddLearner,
    Demote,
    EnterJoint,
    LeaveJoint,
    MakeElectable,
    PromoteAgain,
    Remove,
    Step,
    TransferLeadership,
    WaitCaughtUp,
    WaitPromoted,
)


def apply_step(config: Configuration, step: Step) -> Configuration:
    """Run one plan step at the configuration level, as the actors will: each
    configuration step is one change; waiting and leadership leave it as it is."""
    match step:
        case AddLearner(node_id, node_address, promote, witness):
            return changes.add_learner(
                config, node_id, node_address, promote=promote, witness=witness
            )
        case WaitPromoted(node_id):
            return changes.promote(config, node_id)  # the leader's automatic promotion
        case WaitCaughtUp() | TransferLeadership():
            return config
        case EnterJoint(new_voters):
            return changes.enter_joint(config, dict(new_voters))
        case LeaveJoint():
            return changes.leave_joint(config)
        case Remove(node_id):
            return changes.remove(config, node_id)
        case Demote(node_id):
            return changes.demote(config, node_id)
        case PromoteAgain(node_id):
            return changes.promote_again(config, node_id)
        case MakeElectable(node_id):
            return changes.make_electable(config, node_id)
        case _:
            assert_never(step)


def run_plan(config: Configuration, steps: Iterable[Step]) -> list[Configuration]:
    """Every configuration the plan passes through, the start included."""
    path = [config]
    for step in steps:
        after = apply_step(path[-1], step)
        if after != path[-1]:
            path.append(after)
    return path
