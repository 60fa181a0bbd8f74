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

import structlog

from quorumlog.raft.roles import Role

logger = structlog.get_logger("quorumlog.raft")

# Election timeouts with no leader before a witness campaigns: the voters' turns first.
WITNESS_CAMPAIGN_TIMEOUTS = 3


class WitnessRules:
    """RaftCore's rules for a witness that must lead for a moment (mixed into RaftCore)."""

    @property
    def serves_clients(self) -> bool:
        """Leads and may serve appends and reads: not a witness that only hands over."""
        return self.role is Role.LEADER and self.configs.can_lead(self.id)

    def _witness_may_campaign(self) -> bool:
        config = self.config
        return (
            config is not None
            and self.id in config.witnesses
            and config.is_voter(self.id)
            and self.election.timeouts_as_witness >= WITNESS_CAMPAIGN_TIMEOUTS
        )

    def _hand_over_as_witness(self) -> None:
        """Leading as a witness: transfer to the live voter that can lead and holds the
        most of the log (the transfer catches it up first, then tells it to campaign)."""
        if (
            self.role is not Role.LEADER
            or self.configs.can_lead(self.id)
            or self.transfer is not None
        ):
            return
        live = self.live_voters()
        if not live:
            return
        target = max(live, key=lambda n: (self.tracker.get(n).match_offset, -n))
        logger.info("witness_hands_over", node_id=self.id, group=self.group_id, target=target)
        self.transfer_leadership(target)
