"""Configurations in the log: config batches, and which configuration is in effect.

A configuration takes effect on a node as soon as its batch is appended there, not when it
commits (seed 000: "applies the configuration change in-memory"); if that batch is truncated
the node returns to the configuration before it. The last committed one is also written to
the consensus metadata, so that a restart does not depend on scanning the whole log.
"""

from __future__ import annotations

import msgpack

from quorumlog.log.batch import HEADER_BYTES, BatchHeader, BatchType, build_batch
from quorumlog.membership.config import Configuration, InvalidConfigurationError


def config_batch(config: Configuration) -> bytes:
    payload = msgpack.packb(config.to_wire(), use_bin_type=True)
    return build_batch(payload, record_count=1, batch_type=BatchType.CONFIG)


def config_of(batch: bytes | memoryview, header: BatchHeader) -> Configuration:
    """The configuration a config batch carries (its checksums already checked)."""
    payload = memoryview(batch)[HEADER_BYTES : HEADER_BYTES + header.payload_bytes]
    try:
        return Configuration.from_wire(msgpack.unpackb(payload, raw=False))
    except (ValueError, msgpack.UnpackException) as exc:
        raise InvalidConfigurationError(
            f"undecodable config batch at {header.base_offset}: {exc}"
        ) from None


class ConfigTracker:
    """The last committed configuration and the ones appended after it, in log order.

    Invariant: offsets ascend; every entry after the first is above the commit offset.
    """

    def __init__(self, committed: Configuration | None, committed_offset: int):
        self.committed = committed
        self.committed_offset = committed_offset
        self._appended: list[tuple[int, Configuration]] = []

    @property
    def current(self) -> Configuration | None:
        return self._appended[-1][1] if self._appended else self.committed

    @property
    def previous(self) -> Configuration | None:
        """The configuration `current` replaced in this log, while that change is not
        committed (afterwards this node no longer knows it)."""
        if len(self._appended) >= 2:
            return self._appended[-2][1]
        return self.committed if self._appended else None

    @property
    def change_in_flight(self) -> bool:
        return bool(self._appended)

    def appended(self, offset: int, config: Configuration) -> None:
        if offset <= self.committed_offset:
            return  # already known (a restart replays the tail after the stored config)
        assert not self._appended or offset > self._appended[-1][0]
        self._appended.append((offset, config))

    def truncated(self, from_offset: int) -> None:
        self._appended = [(o, c) for o, c in self._appended if o < from_offset]

    def commit(self, commit_offset: int) -> bool:
        """Advance to what `commit_offset` covers; True if the committed config changed."""
        changed = False
        while self._appended and self._appended[0][0] <= commit_offset:
            self.committed_offset, self.committed = self._appended.pop(0)
            changed = True
        return changed
