"""A witness that holds the newest log may lead for a moment, to hand leadership on.

A witness never campaigns while a voter that can lead may still win (seed 000's appendix).
But a witness can hold entries no such voter has: a leader appended a change and crashed
before its own flush, and only the witness took it. The voters' pre-votes then fail the
witness's up-to-date check, and no one ever leads (simulation seed 30268). TiKV's answer,
taken here: after WITNESS_CAMPAIGN_TIMEOUTS election timeouts with no leader, the witness
campaigns like any voter (the vote's log check keeps that safe); as leader it serves no
client, catches up the voter that can lead with the most of the log, and hands it the
leadership at once (a transfer, retried until one takes it).

A witness may hold only the log's tail: it never sends a follower an entry whose previous
term it does not know (one before its log start), since that tells the follower to start
its log again there and drop what it has, which may be the only full copies. A voter that
needs older records waits for a leader that holds them.
"""

from __future__ import annotations

from quorumlog.membership.config import Configuration
from quorumlog.raft.progress import ProgressTracker

# Election timeouts with no leader before a witness campaigns: the voters' turns first.
WITNESS_CAMPAIGN_TIMEOUTS = 3


def may_campaign(config: Configuration | None, node_id: int, timeouts_without_leader: int) -> bool:
    """Whether a witness campaigns: after its voters' turns, with no leader heard of."""
    return (
        config is not None
        and node_id in config.witnesses
        and config.is_voter(node_id)
        and timeouts_without_leader >= WITNESS_CAMPAIGN_TIMEOUTS
    )


def hand_over_target(live_voters: list[int], tracker: ProgressTracker) -> int | None:
    """Where a witness that leads hands leadership: the live voter that can lead and
    holds the most of the log (the transfer catches it up first)."""
    return max(live_voters, key=lambda n: (tracker.get(n).match_offset, -n), default=None)
