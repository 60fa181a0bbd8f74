"""`quorumlog serve`: one node process on the real disk and real TCP.

Exit codes (docs/cli.md): 0 after SIGTERM/SIGINT (flushed and closed), 1 on a fatal
runtime error (a failed fsync: fail-stop), 2 on bad usage, 3 when the storage is damaged
(not a torn tail) - the message names the file and offset, nothing is deleted.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import structlog
import trio

from quorumlog.actors.node.node import Node
from quorumlog.actors.services.cleaner import in_cleaner_thread
from quorumlog.actors.services.cluster_guard import ForeignClusterError
from quorumlog.actors.services.storage import BootstrapError, WrongNodeError, open_storage
from quorumlog.actors.services.worker import WorkerThread
from quorumlog.log.files import (
    FSYNC_DELAY_FILE,
    CorruptionError,
    OsFileSystem,
    StorageError,
    SyncJournal,
)
from quorumlog.membership.config import Configuration
from quorumlog.server.allocator import keep_freed_memory
from quorumlog.server.data_lock import DataDirInUseError, lock_data_dir
from quorumlog.server.heap import dump_on_signal, start_tracing
from quorumlog.server.listeners import Listeners, Restored, record, restore, setting_of
from quorumlog.server.options import ServeOptions, UsageError
from quorumlog.transport.addresses import is_loopback, parse_address
from quorumlog.transport.tcp import open_tcp_transport
from quorumlog.transport.tls import TlsSetupError, client_context, server_context

logger = structlog.get_logger("quorumlog.serve")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_DAMAGED = 3
# Files synced at once by a flush pass over many partitions (see actors/services/flusher.py).
FSYNC_THREADS = 16


def _sync_journal(data_dir: str) -> SyncJournal | None:
    """For the fault harness only (bench/faults.py): record what each fsync made durable,
    and slow fsyncs down by QUORUMLOG_FAULT_FSYNC_DELAY_MS, or by the milliseconds in
    DATA/fault-fsync-delay-ms while the harness keeps that file."""
    if os.environ.get("QUORUMLOG_FAULT_SYNC_JOURNAL") != "1":
        return None
    delay_ms = float(os.environ.get("QUORUMLOG_FAULT_FSYNC_DELAY_MS", "0"))
    return SyncJournal(
        os.path.join(data_dir, "sync-journal"),
        delay_ms / 1000,
        delay_path=os.path.join(data_dir, FSYNC_DELAY_FILE),
    )


def serve(options: ServeOptions) -> int:
    host, _ = parse_address(options.listen)
    if options.secret is None and not is_loopback(host):
        logger.warning(
            "no_secret_on_open_network",
            listen=options.listen,
            warning="anyone who can reach this address can read and write the log: "
            "set --secret-file",
        )
    if options.join and options.peers:
        raise UsageError("--join and --peers exclude each other: a joining node is added later")
    given = Listeners(**options.listeners)
    _check_tls(given)
    if options.peers is not None and options.node_id not in options.peers:
        raise UsageError(f"--peers must include this node ({options.node_id})")
    if not options.peers and not options.join and not os.path.isdir(options.data_dir):
        raise UsageError(str(BootstrapError.no_cluster(options.data_dir)))  # nothing made
    # Before anything is written: a node bootstrapped with an address it cannot serve
    # kept that address in its configuration when started again with a corrected one.
    if _cannot_listen_on([("--listen", options.listen), *given.addresses()]):
        return EXIT_FAILED
    try:
        lock = lock_data_dir(options.data_dir)  # before anything there is read or written
    except (DataDirInUseError, OSError) as exc:
        print(f"quorumlog serve: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        return _serve_locked(options)
    finally:
        os.close(lock)


def _check_tls(listeners: Listeners) -> None:
    if listeners.tls is not None:
        try:  # a file that cannot be used stops the node now, with one line
            server_context(*listeners.tls)
        except TlsSetupError as exc:
            raise UsageError(str(exc)) from None


def _cannot_listen_on(addresses: list[tuple[str, str]]) -> bool:
    """Whether one of (flag, HOST:PORT) cannot be listened on now: then one line says why."""
    for flag, address in addresses:
        if problem := _cannot_listen(address):
            print(
                f"quorumlog serve: cannot listen on {address} ({flag}): {problem}", file=sys.stderr
            )
            return True
    return False


def _warn_if_console_open(options: ServeOptions, listeners: Listeners) -> None:
    http_listen = listeners.http_listen
    if (
        http_listen is not None
        and options.secret is None
        and not is_loopback(parse_address(http_listen)[0])
    ):
        logger.warning(
            "no_secret_on_open_console",
            http_listen=http_listen,
            warning="anyone who can reach this address can read the log in the console: "
            "set --secret-file",
        )


def _warn_if_peers_differ(options: ServeOptions, stored: Any) -> None:
    """--peers only bootstraps: on a directory that holds a cluster, the configuration it
    holds stands, and a --peers that says otherwise is worth one line."""
    if not options.peers or stored is None:
        return
    config = Configuration.from_wire(stored)
    held = {n: config.addresses.get(n) for n in config.voters}
    if held != options.peers:
        members = ",".join(f"{n}={a}" for n, a in sorted(held.items()))
        print(
            f"quorumlog serve: warning: --peers differ from the configuration in "
            f"{options.data_dir} ({members}), which stands (change members with "
            "`quorumlog members`)",
            file=sys.stderr,
        )


def _cannot_listen(address: str) -> str | None:
    """Why `address` cannot be listened on now (in use, not this host's), or None: a bind
    tried and let go, as the listener will bind it (SO_REUSEADDR, every address of the
    name)."""
    host, port = parse_address(address)
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, proto, _, sockaddr in infos:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(sockaddr)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _can_serve_restored(options: ServeOptions, restored: Restored) -> bool:
    """Whether the listeners taken from the data directory can be served (if not, one line
    says why); one log line names them."""
    if not restored.from_file:
        return True
    logger.info("listeners_restored", data=options.data_dir, **restored.from_file)
    _check_tls(restored.listeners)
    return not _cannot_listen_on(
        [
            (f"{flag}, recorded in {options.data_dir}", address)
            for flag, address in restored.listeners.addresses()
            if setting_of(flag) in restored.from_file
        ]
    )


def _serve_locked(options: ServeOptions) -> int:
    keep_freed_memory()
    try:
        tracing = start_tracing()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        restored = restore(options.data_dir, options.listeners)
    except CorruptionError as exc:
        return _refuse_damaged(exc)
    if not _can_serve_restored(options, restored):
        return EXIT_FAILED
    listeners = restored.listeners
    _warn_if_console_open(options, listeners)
    rng = random.Random()
    worker = WorkerThread()  # every fsync of this node runs there
    try:
        storage = open_storage(
            OsFileSystem(sync_journal=_sync_journal(options.data_dir)),
            options.data_dir,
            node_id=options.node_id,
            peers=options.peers,
            rng=rng,
            join=options.join,
            log_config=options.log_config,
            repair=options.repair,
            run_sync=worker,
        )
    except CorruptionError as exc:
        return _refuse_damaged(exc)
    except BootstrapError as exc:
        raise UsageError(str(exc)) from None
    except WrongNodeError as exc:
        print(f"quorumlog serve: refusing to start: {exc}", file=sys.stderr)
        return EXIT_FAILED
    _warn_if_peers_differ(options, storage.controller.meta.config)
    failure: StorageError | ForeignClusterError | None = None
    try:
        if listeners != restored.recorded:
            record(options.data_dir, listeners)
        trio.run(_run, options, listeners, storage, rng, worker, tracing)
    except (StorageError, ForeignClusterError) as exc:
        failure = exc
    except BaseExceptionGroup as group:  # raised inside the node's nurseries
        stopped_on, _ = group.split((StorageError, ForeignClusterError))
        if stopped_on is None:
            raise
        failure = _first_leaf(stopped_on)
        if isinstance(failure, StorageError):  # the whole story, for the log only
            logger.critical("fail_stop_traceback", exc_info=group)
    finally:
        worker.stop()
    if isinstance(failure, ForeignClusterError):
        logger.critical("foreign_cluster", error=str(failure))
        print(f"quorumlog serve: refusing to serve: {failure}", file=sys.stderr)
        return EXIT_FAILED
    if failure is not None:
        logger.critical("fail_stop", error=str(failure))
        print(f"quorumlog serve: stopped on a storage error: {failure}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _refuse_damaged(exc: CorruptionError) -> int:
    logger.error("damaged_storage", error=str(exc))
    print(f"quorumlog serve: refusing to start: {exc}", file=sys.stderr)
    return EXIT_DAMAGED


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _wall_clock_ms() -> Callable[[], int]:
    """The clock leaders stamp log-append batches with. QUORUMLOG_FAULT_CLOCK_OFFSET_MS
    shifts it, for the tests of timestamps across leaders whose clocks disagree (as
    libfaketime does from outside, without it)."""
    offset_ms = int(os.environ.get("QUORUMLOG_FAULT_CLOCK_OFFSET_MS", "0"))
    return lambda: time.time_ns() // 1_000_000 + offset_ms


async def _run(
    options: ServeOptions,
    listeners: Listeners,
    storage,
    rng: random.Random,
    worker: WorkerThread,
    tracing: bool,
) -> None:
    node = Node(
        options.node_id,
        storage,
        settings=options.settings,
        rng=rng,
        run_sync=worker,
        fsync_threads=FSYNC_THREADS,
        wall_clock_ms=_wall_clock_ms(),
        cleaner_sync=in_cleaner_thread,
    )

    tls = listeners.tls

    def open_transport(handler):
        # The node sets the peers from its configuration once it runs.
        return open_tcp_transport(
            options.node_id,
            options.listen,
            handler,
            rng=rng,
            secret=options.secret,
            ssl_context=server_context(*tls) if tls else None,
            peer_ssl_context=client_context(tls[2], *tls[:2]) if tls else None,
            identity=node.cluster.identity,
        )

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run, open_transport)
            if tracing:  # QUORUMLOG_TRACEMALLOC: SIGUSR2 writes the heap's holders
                await nursery.start(dump_on_signal, options.data_dir)
            if listeners.http:
                # Imported here, as the Kafka listener is: a node without one loads less.
                from quorumlog.server.console_listener import serve_console

                await nursery.start(
                    serve_console, node, listeners.http, options.listen, options.secret, tls
                )
            if listeners.kafka_listen:
                # Imported here: Kafka's schemas cost a node without a listener 0.25 s to load.
                from quorumlog.actors.kafka.listener import serve_kafka

                node.kafka_address = listeners.kafka_listen
                await nursery.start(
                    serve_kafka,
                    node,
                    listeners.kafka_listen,
                    rng,
                    options.secret,
                    listeners.auto_create,
                )
            logger.info("serving", node_id=options.node_id, listen=options.listen)
            async for signum in signals:
                logger.info("stopping", node_id=options.node_id, signal=signal.Signals(signum).name)
                await node.stop_leading()  # serving meanwhile: clients follow it
                nursery.cancel_scope.cancel()
                break
    await node.close()
    logger.info("stopped", node_id=options.node_id, flushed_offset=node.log.flushed_offset)
