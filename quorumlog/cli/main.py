"""The `quorumlog` command line."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
from importlib.metadata import entry_points

# kio registers strategies with hypothesis whenever it can import it (a dev venv has it):
# a node would load a test library and write `.hypothesis/` into its working directory.
# No command needs it.
sys.modules.setdefault("hypothesis", None)

import click  # noqa: E402

from quorumlog.cli import (  # noqa: E402
    cluster_commands,
    commands,
    group_commands,
    members_commands,
    partition_commands,
    status_command,
    topic_commands,
)
from quorumlog.cli.commands import read_secret  # noqa: E402
from quorumlog.server import options  # noqa: E402
from quorumlog.server.listeners import Listeners  # noqa: E402
from quorumlog.server.logs import configure_logging  # noqa: E402


class OneLineErrors(click.Group):
    """Bad usage is one line on stderr naming the flag, exit 2; click's own form is three
    (`Usage:`, `Try ... --help`, `Error:`), which scripts and humans must then pick apart."""

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        # SIGTERM (systemd, Kubernetes, `docker stop`) stops a command as Ctrl-C does: `dev`
        # stops its nodes, a group consumer leaves its group. `serve` handles both itself.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            code = super().main(*args, **kwargs)  # ctx.exit's code, or a command's result
        except click.exceptions.NoArgsIsHelpError as exc:  # a bare `quorumlog`: its help
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            message = " ".join(exc.format_message().split())
            click.echo(f"quorumlog: {message}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("quorumlog: aborted", err=True)
            sys.exit(1)
        return code if isinstance(code, int) else 0


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="quorumlog", message="quorumlog %(version)s")
def main() -> None:
    """quorumlog: a replicated log service (Raft, trio, msgpack over TCP).

    Set QUORUMLOG_BROKERS once instead of -b on every command. Shell completion:
    eval "$(_QUORUMLOG_COMPLETE=bash_source quorumlog)" (zsh_source, fish_source).
    """


def _load_config(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """--config is read first: its [node] table supplies defaults that flags and QUORUMLOG_*
    environment variables override (precedence: flag, environment, file, default)."""
    try:
        config = options.load_config_file(path)
    except options.UsageError as exc:
        raise click.BadParameter(str(exc)) from None
    ctx.meta["quorumlog.config"] = config
    ctx.default_map = {**(ctx.default_map or {}), **config.node_defaults}
    return path


@main.command(
    epilog="Settings of --config (TOML), with their defaults:\n\n"
    + options.settings_help().replace("\n", "\n\n")
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    envvar="QUORUMLOG_CONFIG",
    is_eager=True,
    callback=_load_config,
    expose_value=False,
    help="TOML file of settings.",
)
@click.option(
    "--id",
    "node_id",
    type=click.IntRange(min=1),
    envvar="QUORUMLOG_ID",
    required=True,
    help="This node's id.",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False),
    envvar="QUORUMLOG_DATA",
    required=True,
    help="Data directory.",
)
@click.option(
    "--listen",
    envvar="QUORUMLOG_LISTEN",
    required=True,
    help="HOST:PORT to serve peers and clients on.",
)
@click.option(
    "--peers",
    envvar="QUORUMLOG_PEERS",
    default=None,
    help="ID=HOST:PORT,... of every voter, this node included (first start).",
)
@click.option("--join", is_flag=True, help="Start with no configuration and wait to be added.")
@click.option(
    "--secret-file",
    envvar="QUORUMLOG_SECRET_FILE",
    default=None,
    help="File holding the cluster secret.",
)
@click.option(
    "--http-listen",
    envvar="QUORUMLOG_HTTP_LISTEN",
    default=None,
    help="HOST:PORT to serve the web console (/), its JSON (/api/) and Prometheus "
    "metrics (/metrics) on.",
)
@click.option(
    "--metrics",
    envvar="QUORUMLOG_METRICS",
    default=None,
    help="The same as --http-listen (its older name).",
)
@click.option(
    "--http-allow-writes",
    is_flag=True,
    envvar="QUORUMLOG_HTTP_ALLOW_WRITES",
    help="Let the console produce records (a form on each topic's page).",
)
@click.option(
    "--http-auth-metrics",
    is_flag=True,
    envvar="QUORUMLOG_HTTP_AUTH_METRICS",
    help="Ask scrapers of /metrics for the cluster secret too (as the console does).",
)
@click.option(
    "--kafka-listen",
    envvar="QUORUMLOG_KAFKA_LISTEN",
    default=None,
    help="HOST:PORT to serve Kafka clients on (Kafka's wire protocol).",
)
@click.option(
    "--auto-create-topics",
    is_flag=True,
    envvar="QUORUMLOG_AUTO_CREATE_TOPICS",
    help="A Kafka client naming an unknown topic creates it (Kafka's auto.create.topics.enable).",
)
@click.option(
    "--auto-create-partitions",
    type=click.IntRange(min=1),
    default=Listeners.auto_create_partitions,
    show_default=True,
    envvar="QUORUMLOG_AUTO_CREATE_PARTITIONS",
    help="Partitions of a topic created so.",
)
@click.option(
    "--auto-create-replicas",
    type=click.IntRange(min=1),
    default=Listeners.auto_create_replicas,
    show_default=True,
    envvar="QUORUMLOG_AUTO_CREATE_REPLICAS",
    help="Replicas of each (every node, in a smaller cluster).",
)
@click.option(
    "--tls-cert",
    envvar="QUORUMLOG_TLS_CERT",
    default=None,
    help="PEM certificate of this node (with --tls-key and --tls-ca: TLS for everyone).",
)
@click.option("--tls-key", envvar="QUORUMLOG_TLS_KEY", default=None, help="Its private key.")
@click.option(
    "--tls-ca",
    envvar="QUORUMLOG_TLS_CA",
    default=None,
    help="PEM CA that signed the nodes' and clients' certificates (both are required).",
)
@click.option(
    "--log-format",
    type=click.Choice(["console", "json"]),
    envvar="QUORUMLOG_LOG_FORMAT",
    default="console",
    show_default=True,
)
@click.option(
    "--repair", is_flag=True, help="DANGEROUS: cut the log at damage instead of refusing to start."
)
@click.pass_context
def serve(
    ctx,
    node_id,
    data_dir,
    listen,
    peers,
    join,
    secret_file,
    http_listen,
    metrics,
    http_allow_writes,
    http_auth_metrics,
    kafka_listen,
    auto_create_topics,
    auto_create_partitions,
    auto_create_replicas,
    tls_cert,
    tls_key,
    tls_ca,
    log_format,
    repair,
):
    """Run one node of a cluster.

    \b
    Example (a new 3-node cluster; start all three the same way):
      quorumlog serve --id 1 --data /var/lib/ql/1 --listen 127.0.0.1:7001 \\
          --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003
    A restart needs only --id, --data and --listen: the configuration, and the Kafka and
    HTTP listeners with their settings (--kafka-listen, --http-*, --auto-create-*, --tls-*),
    are read from --data; a listener flag given again replaces the one kept there. Every
    flag can also come from the environment (QUORUMLOG_ID, QUORUMLOG_DATA, ...) or the
    [node] table of --config.
    """
    configure_logging(log_format)
    config = ctx.meta["quorumlog.config"]
    tls_files = (tls_cert, tls_key, tls_ca)
    if any(tls_files) and not all(tls_files):
        raise click.UsageError("--tls-cert, --tls-key and --tls-ca go together: give all three")
    if http_listen and metrics and http_listen != metrics:
        raise click.UsageError("--metrics is another name for --http-listen: give one address")
    listeners = _given(
        ctx,
        kafka_listen=kafka_listen,
        http_allow_writes=http_allow_writes,
        http_auth_metrics=http_auth_metrics,
        auto_create_topics=auto_create_topics,
        auto_create_partitions=auto_create_partitions,
        auto_create_replicas=auto_create_replicas,
        # Absolute: the data directory keeps them for restarts from anywhere.
        tls_cert=tls_cert and os.path.abspath(tls_cert),
        tls_key=tls_key and os.path.abspath(tls_key),
        tls_ca=tls_ca and os.path.abspath(tls_ca),
    )
    if _given(ctx, http_listen=http_listen, metrics=metrics):
        listeners["http_listen"] = http_listen or metrics
    from quorumlog.server import server  # the node: loaded by the commands that run one

    try:
        serve_options = options.ServeOptions(
            node_id=node_id,
            data_dir=data_dir,
            listen=listen,
            peers=options.parse_peers(peers),
            secret=read_secret(secret_file),
            settings=config.raft,
            log_config=config.log,
            repair=repair,
            join=join,
            listeners=listeners,
        )
        code = server.serve(serve_options)
    except (options.UsageError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    sys.exit(code)


def _given(ctx: click.Context, **values) -> dict:
    """Those of `values` (by parameter name) given to this run: on the command line, in the
    environment or in --config, not a default."""
    return {
        name: value
        for name, value in values.items()
        if ctx.get_parameter_source(name) is not click.ParameterSource.DEFAULT
    }


@main.command()
@click.option("--nodes", type=click.IntRange(1, 7), default=3, show_default=True)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False),
    default="quorumlog-dev",
    show_default=True,
    help="Where the nodes keep their data and logs; delete it to start afresh.",
)
@click.option("--base-port", type=click.IntRange(1, 65535 - 7), default=7001, show_default=True)
@click.option(
    "--kafka-base-port",
    type=click.IntRange(1, 65535 - 7),
    default=9092,
    show_default=True,
    help="Node N serves Kafka clients on this port + N - 1.",
)
@click.option(
    "--http-base-port",
    type=click.IntRange(1, 65535 - 7),
    default=8081,
    show_default=True,
    help="Node N serves its web console (and /metrics) on this port + N - 1.",
)
def dev(
    nodes: int, data_dir: str, base_port: int, kafka_base_port: int, http_base_port: int
) -> None:
    """Run a local cluster in the foreground with a live status table.

    \b
    Example:
      quorumlog dev --nodes 3 --data /tmp/ql --base-port 7001 --kafka-base-port 9092
    Data and logs go under --data, relative to where dev runs (./quorumlog-dev by default,
    so `make run` keeps them in the clone): node N's data in DATA/nodeN, its log in
    DATA/nodeN.log. A second run on the same --data restarts the same cluster, records and
    topics included; to start afresh, stop dev and delete that folder (rm -rf quorumlog-dev).
    The web console of node 1 is at http://127.0.0.1:8081/ (--http-base-port). Ctrl-C stops
    the nodes cleanly; dev refuses to start, naming the port, while another one runs.
    """
    from quorumlog.cli.dev import run_dev

    bases = {
        "--base-port": base_port,
        "--kafka-base-port": kafka_base_port,
        "--http-base-port": http_base_port,
    }
    for (flag, first), (other, second) in itertools.combinations(bases.items(), 2):
        if abs(first - second) < nodes:
            raise click.BadParameter(
                f"its ports {second}..{second + nodes - 1} overlap those of {flag} "
                f"({first}..{first + nodes - 1})",
                param_hint=f"'{other}'",
            )
    run_dev(nodes, data_dir, base_port, kafka_base_port, http_base_port)


@main.command()
def demo() -> None:
    """A guided tour on a throw-away cluster; exits 0 only if every check held.

    \b
    Example:
      quorumlog demo
    It appends 100,000 records with each acks level, kills the leader with SIGKILL,
    restarts it, and checks that no acknowledged record was lost.
    """
    from quorumlog.cli.demo import run_demo

    sys.exit(0 if run_demo() else 1)


@main.command("unsafe-recover")
@click.option(
    "--data",
    "data_dirs",
    multiple=True,
    required=True,
    type=click.Path(file_okay=False, exists=True),
    help="Data directory of a stopped surviving node (several with --inspect).",
)
@click.option(
    "--members", default=None, help="ID=HOST:PORT,... the new voters (usually the survivors)."
)
@click.option(
    "--inspect", is_flag=True, help="Only compare the given data directories; change nothing."
)
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object per group.")
@click.option("--yes", is_flag=True, help="Really rewrite the configuration.")
def unsafe_recover(
    data_dirs: tuple[str, ...], members: str | None, inspect: bool, as_json: bool, yes: bool
) -> None:
    """Recover from the loss of a majority: DANGEROUS, acknowledged records may be lost.

    \b
    Example (nodes 2 and 3 are lost for good; node 1 survives, stopped):
      quorumlog unsafe-recover --inspect --data /var/lib/ql/1   # every group: what is lost
      quorumlog unsafe-recover --data /var/lib/ql/1 --members 1=10.0.0.1:7001 --yes
    Then start node 1 and add the others back with `members add`.
    """
    from quorumlog.server import recover

    try:
        reports = recover.inspect(data_dirs)
    except Exception as exc:  # damaged or foreign data: one line, like every command
        raise click.ClickException(str(exc)) from None
    for report in reports:  # every group, the controller's first
        click.echo(json.dumps(report.to_json()) if as_json else report.to_line())
    losing = [f"{r.topic}/{r.partition}" for r in reports if r.lost is not None]
    if losing:
        click.echo(
            f"WARNING: committed records are on no survivor in {', '.join(losing)}: "
            "they will be lost",
            err=True,
        )
    if inspect:
        return
    if len(data_dirs) != 1 or not members:
        raise click.UsageError("give one --data and --members (or --inspect to compare)")
    new_members = options.parse_peers(members)
    click.echo(
        "WARNING: unsafe recovery forces a new configuration; records acknowledged by the lost "
        "nodes but missing here are lost for good.",
        err=True,
    )
    if not yes:
        click.echo("nothing changed: re-run with --yes to rewrite the configuration", err=True)
        sys.exit(1)
    from quorumlog.server.data_lock import DataDirInUseError, lock_data_dir

    try:
        lock_data_dir(data_dirs[0])  # held until the command exits: no node serves it meanwhile
    except (DataDirInUseError, OSError) as exc:
        raise click.ClickException(f"{exc}: stop that node first") from None
    config = recover.recover(data_dirs[0], new_members)
    click.echo(f"configuration version {config.version}: voters {sorted(config.voters)}")


for command in (
    commands.produce,
    commands.consume,
    status_command.status,
    members_commands.members,
    members_commands.transfer_leader,
    topic_commands.topic,
    partition_commands.partition,
    group_commands.group,
    cluster_commands.cluster,
):
    main.add_command(command)

# Commands shipped by other packages of the distribution (`quorumlog bench`): they depend on
# the product, never the reverse.
for entry_point in entry_points(group="quorumlog.cli.commands"):
    main.add_command(entry_point.load(), entry_point.name)

if __name__ == "__main__":
    sys.exit(main())
