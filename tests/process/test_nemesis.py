"""A bounded run of the fault harness (`quorumlog bench nemesis`) against real processes:
fixed seeds, one drawing from the disk faults, one from all of them with membership
changes, with appends spread over `default` and two topics of three partitions. Every run
must keep every promise of docs/reliability.md in every partition, and a stream-mode and a
queue-mode consumer group theirs; a failure prints the seed and the command that replays
its schedule."""

from __future__ import annotations

import pytest

from quorumlog.bench.nemesis import FAULTS, Plan, run_plan

FAMILIES = {
    "disks": ("lose-unsynced", "lose-unsynced-all", "damage", "kill-leader", "slow-disk"),
    "everything": FAULTS,
}
# 30-60 s a run on 2 cores: one seed of disks, one of everything (which draws kills,
# pauses, partitions and disk faults alike); the suite has 15 minutes in all, and
# `bench nemesis` runs each family for as many seeds and steps as wanted.
RUNS = [
    ("disks", 101),
    ("everything", 101),
]
STEPS = 8


# Alone: a slow disk must stop nothing, which a machine busy with other tests can make
# look otherwise (no append acknowledged while the disk was slow).
@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.parametrize(("family", "seed"), RUNS)
def test_no_promise_is_broken(family, seed, tmp_path):
    faults = FAMILIES[family]
    result, history = run_plan(str(tmp_path), Plan(seed, faults, steps=STEPS))
    history.write(str(tmp_path / "history.jsonl"))
    replay = f"quorumlog bench nemesis --seed {seed} --faults {','.join(faults)} --steps {STEPS}"
    details = result["details"]
    assert details["violations"] == [], f"replay: {replay}; node logs in {tmp_path}"
    assert result["faults"] >= STEPS
    assert details["quorum_acked"] > 0, "the workload ran"
    partitions = details["partitions"]
    assert len(partitions) == 7, "default/0 and two topics of three partitions, all checked"
    assert all(p["quorum_acked"] > 0 for p in partitions.values()), partitions
    assert result["recovery_s"] is not None, "the cluster took appends again after healing"
    assert details["stream_delivered"] > 0 and details["queue_delivered"] > 0, "groups consumed"
    assert all(r is None or r > 0 for r in result["slow_disk_ratios"]), "a slow disk stops nothing"
