"""A node's data directory: the log and the consensus metadata, opened by the rules.

    DIR/consensus.meta   term, vote, last committed configuration, incarnation
    DIR/log/             segments and their indexes

A new directory is bootstrapped from the initial voters, or (--join) starts with no
configuration and learns it from the leader that adds it; either way it gets a fresh
incarnation id (storage rule 9). A log without metadata, or metadata that cannot be read, is corruption:
never start fresh on it (rule 5).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass

from log.files import CorruptionError, FileSystem
from log.metadata import ConsensusMetadata, MetadataStore
from log.wal import Log, LogConfig, RunSync
from membership.config import Configuration, InvalidConfigurationError

LOG_DIR = "log"


class BootstrapError(Exception):
    """The data directory is empty and nothing says how to start the cluster."""


@dataclass(slots=True)
class NodeStorage:
    log: Log
    store: MetadataStore
    meta: ConsensusMetadata


def open_storage(
    fs: FileSystem,
    data_dir: str,
    *,
    peers: Mapping[int, str] | None,
    rng: random.Random,
    join: bool = False,
    log_config: LogConfig | None = None,
    run_sync: RunSync,
    repair: bool = False,
) -> NodeStorage:
    fs.makedirs(data_dir)
    store = MetadataStore(fs, data_dir)
    meta = store.load()
    log_dir = os.path.join(data_dir, LOG_DIR)
    had_log = fs.exists(log_dir) and any(n.endswith(".log") for n in fs.listdir(log_dir))
    log = Log.open(fs, log_dir, log_config, run_sync=run_sync, repair=repair)
    if meta is None:
        if had_log and log.dirty_offset >= 0:
            log.close()
            raise CorruptionError(store.path, 0, "metadata file is missing but the log has data")
        if join:
            config = None  # learns its configuration from the leader that adds it
        elif peers:
            config = Configuration.bootstrap(peers).to_wire()
        else:
            log.close()
            raise BootstrapError(
                f"{data_dir} holds no cluster: give --peers to start a new one, or --join"
            )
        meta = ConsensusMetadata(incarnation=f"{rng.getrandbits(64):016x}", config=config)
        store.save(meta)
        return NodeStorage(log, store, meta)
    if meta.config is not None:
        try:
            Configuration.from_wire(meta.config)
        except InvalidConfigurationError as exc:
            log.close()
            raise CorruptionError(
                store.path, 0, f"stored configuration is invalid: {exc}"
            ) from None
    return NodeStorage(log, store, meta)
