"""A bounded run of the fault harness (`quorumlog bench nemesis`) against real processes:
fixed seeds, each drawing from one family of faults, then all of them with membership
changes. Every run must keep every promise of RELIABILITY.md; a failure prints the seed and
the command that replays its schedule."""

from __future__ import annotations

import pytest

from bench.nemesis import FAULTS, Plan, run_plan

CASES = {
    "kills and pauses": (101, ("kill-leader", "kill-follower", "kill-majority", "pause-leader")),
    "partitions": (102, ("isolate-leader", "partition", "bridge", "one-way", "slow", "flap")),
    "disks": (103, ("lose-unsynced", "lose-unsynced-all", "damage", "kill-leader")),
    "everything": (104, FAULTS),
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_promise_is_broken(case, tmp_path):
    seed, faults = CASES[case]
    plan = Plan(seed, faults, steps=6)
    result, history = run_plan(str(tmp_path), plan)
    history.write(str(tmp_path / "history.jsonl"))
    replay = f"quorumlog bench nemesis --seed {seed} --faults {','.join(faults)} --steps 6"
    details = result["details"]
    assert details["violations"] == [], f"replay: {replay}; node logs in {tmp_path}"
    assert result["faults"] >= plan.steps
    assert details["quorum_acked"] > 0, "the workload ran"
    assert result["recovery_s"] is not None, "the cluster took appends again after healing"
