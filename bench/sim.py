"""`quorumlog bench sim`: run many simulation seeds (bench/simulation.py) and count.

Each seed runs a whole cluster under faults twice and compares the trace hashes; a failing
seed is printed with the command that replays it.
"""

from __future__ import annotations

import sys
import time

from quorumlog.bench.report import print_table
from quorumlog.bench.sim_checks import Violation
from quorumlog.bench.sim_elections import run_elections
from quorumlog.bench.simulation import run_seed

# (cluster size, with membership changes, with three topics of four partitions, the
# followers' `[raft] follower_flush`, with an operator changing the topics meanwhile:
# bench/sim_topics.py, with a compacted topic: bench/sim_compaction.py)
KINDS = (
    (3, False, False, "quorum", False, False),
    (5, False, False, "quorum", False, False),
    (3, True, False, "quorum", False, False),
    (5, True, False, "quorum", False, False),
    (3, False, True, "quorum", False, False),
    (5, True, True, "quorum", False, False),
    (3, False, False, "lazy", False, False),
    (5, False, True, "quorum", True, False),
    (5, True, True, "quorum", True, False),
    (3, False, False, "quorum", False, True),
    (5, True, False, "lazy", False, True),
)


def run(
    quick: bool = False,
    seeds: int | None = None,
    first_seed: int = 10_000,
    election_partitions: int = 600,
    topic_changes_only: bool = False,
) -> list[dict]:
    """`topic_changes_only`: the kinds with topic changes alone (no election rows)."""
    per_kind = seeds or (25 if quick else 250)
    rows = []
    for size, membership, topics, follower_flush, topic_changes, compact in KINDS:
        if topic_changes_only and not topic_changes:
            continue
        failed: list[str] = []
        start = time.perf_counter()
        for seed in range(first_seed, first_seed + per_kind):
            try:
                kind = {
                    "size": size,
                    "membership": membership,
                    "topics": topics,
                    "follower_flush": follower_flush,
                    "topic_changes": topic_changes,
                    "compact": compact,
                }
                if run_seed(seed, **kind) != run_seed(seed, **kind):
                    failed.append(f"seed {seed}: did not replay")
            except Violation as exc:
                failed.append(str(exc)[:300])
            except BaseExceptionGroup as group:
                failed.append("; ".join(str(e)[:300] for e in group.exceptions))
        elapsed = time.perf_counter() - start
        rows.append(
            {
                "figure": f"{size} nodes{' + membership changes' if membership else ''}"
                f"{' + 3 topics x 4 partitions' if topics else ''}"
                f"{f', follower_flush={follower_flush}' if follower_flush != 'quorum' else ''}"
                f"{' + topic changes' if topic_changes else ''}"
                f"{' + a compacted topic' if compact else ''}",
                "seeds": per_kind,
                "failed": len(failed),
                "seeds_s": per_kind / elapsed,
                "replay": (
                    f"python -c 'from quorumlog.bench.simulation import run_seed; "
                    f"run_seed(SEED, size={size}, membership={membership}, topics={topics}, "
                    f"follower_flush={follower_flush!r}, topic_changes={topic_changes}, "
                    f"compact={compact})'"
                ),
            }
        )
        for line in failed:
            print(line, file=sys.stderr)
    if not topic_changes_only:
        rows += _election_rows(max(1, per_kind // 25), first_seed, election_partitions)
    return rows


def _election_rows(seeds: int, first_seed: int, partitions: int) -> list[dict]:
    """The elections kind (bench/sim_elections.py): 30-60 s a seed, so a 25th as many. A
    seed whose first event failed never reaches the second: it fails both rows."""
    events = {"one lost": ([], []), "all restarted": ([], [])}  # event -> (failed, elapsed)
    for seed in range(first_seed, first_seed + seeds):
        try:
            times = run_elections(seed, partitions)
        except* Violation as group:
            for line in (str(e)[:300] for e in group.exceptions):
                print(line, file=sys.stderr)
                events["all restarted"][0].append(line)
                if "all restarted" not in line:
                    events["one lost"][0].append(line)
        else:
            events["one lost"][1].append(times.one_lost_s)
            events["all restarted"][1].append(times.all_restarted_s)
    return [
        {
            "figure": f"3 nodes, {partitions} partitions, {event}"
            ": simulated s until every group leads",
            "seeds": seeds,
            "failed": len(failed),
            "max_s": max(elapsed, default=None),
            "replay": "python -c 'from quorumlog.bench.sim_elections import run_elections; "
            f"print(run_elections(SEED, {partitions}))'",
        }
        for event, (failed, elapsed) in events.items()
    ]


if __name__ == "__main__":
    print_table("bench sim", run(quick="--quick" in sys.argv))
