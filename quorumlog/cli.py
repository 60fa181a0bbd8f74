"""The `quorumlog` command line."""

from __future__ import annotations

import os
import sys
import time

import click

from bench.report import print_table, write_jsonl
from bench.scenarios import SCENARIOS, scenario
from quorumlog import commands, server
from quorumlog.commands import read_secret
from quorumlog.logs import configure_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """quorumlog: a replicated log service (Raft, trio, msgpack over TCP)."""


@main.command(
    epilog="Settings of --config (TOML), with their defaults:\n\n"
    + server.settings_help().replace("\n", "\n\n")
)
@click.option("--id", "node_id", type=click.IntRange(min=1), required=True, help="This node's id.")
@click.option(
    "--data", "data_dir", type=click.Path(file_okay=False), required=True, help="Data directory."
)
@click.option("--listen", required=True, help="HOST:PORT to serve peers and clients on.")
@click.option(
    "--peers",
    default=None,
    help="ID=HOST:PORT,... of every voter, this node included (first start).",
)
@click.option("--join", is_flag=True, help="Start with no configuration and wait to be added.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file of settings.",
)
@click.option(
    "--secret-file",
    envvar="QUORUMLOG_SECRET_FILE",
    default=None,
    help="File holding the cluster secret.",
)
@click.option("--metrics", default=None, help="HOST:PORT to serve Prometheus metrics on.")
@click.option("--log-format", type=click.Choice(["console", "json"]), default="console")
@click.option(
    "--repair", is_flag=True, help="DANGEROUS: cut the log at damage instead of refusing to start."
)
def serve(
    node_id, data_dir, listen, peers, join, config_file, secret_file, metrics, log_format, repair
):
    """Run one node of a cluster.

    \b
    Example (a new 3-node cluster; start all three the same way):
      quorumlog serve --id 1 --data /var/lib/ql/1 --listen 127.0.0.1:7001 \\
          --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003
    A restart needs only --id, --data and --listen.
    """
    configure_logging(log_format)
    if join:
        raise click.UsageError("--join is not supported yet: membership changes are not built")
    if metrics:
        raise click.UsageError("--metrics is not supported yet")
    try:
        settings, log_config = server.load_config_file(config_file)
        options = server.ServeOptions(
            node_id=node_id,
            data_dir=data_dir,
            listen=listen,
            peers=server.parse_peers(peers),
            secret=read_secret(secret_file),
            settings=settings,
            log_config=log_config,
            repair=repair,
        )
        code = server.serve(options)
    except (server.UsageError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    sys.exit(code)


@main.command()
@click.argument("name", type=click.Choice([*SCENARIOS, "all"]))
@click.option("--quick", is_flag=True, help="Smallest sizes that still say something (CI, smoke).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="JSON-lines file for every figure (default: bench-results/NAME-TIME.jsonl).",
)
def bench(name: str, quick: bool, out: str | None) -> None:
    """Run a benchmark scenario and print its figures beside its baselines.

    \b
    Example:
      quorumlog bench storage --quick
    """
    names = list(SCENARIOS) if name == "all" else [name]
    if out is None:
        os.makedirs("bench-results", exist_ok=True)
        out = os.path.join("bench-results", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    for each in names:
        click.echo(f"running {each}{' (quick)' if quick else ''} ...", err=True)
        rows = scenario(each)(quick=quick)
        print_table(f"bench {each}", rows)
        write_jsonl(out, each, rows)
    click.echo(f"figures written to {out}", err=True)


@main.command()
@click.option("--nodes", type=click.IntRange(1, 7), default=3, show_default=True)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False),
    default="quorumlog-dev",
    show_default=True,
)
@click.option("--base-port", type=click.IntRange(1, 65535 - 7), default=7001, show_default=True)
def dev(nodes: int, data_dir: str, base_port: int) -> None:
    """Run a local cluster in the foreground with a live status table.

    \b
    Example:
      quorumlog dev --nodes 3 --data /tmp/ql --base-port 7001
    A second run on the same --data restarts the same cluster.
    """
    from quorumlog.dev import run_dev

    run_dev(nodes, data_dir, base_port)


@main.command()
def demo() -> None:
    """A guided tour on a throw-away cluster; exits 0 only if every check held.

    \b
    Example:
      quorumlog demo
    It appends 100,000 records with each acks level, kills the leader with SIGKILL,
    restarts it, and checks that no acknowledged record was lost.
    """
    from quorumlog.demo import run_demo

    sys.exit(0 if run_demo() else 1)


for command in (commands.produce, commands.consume, commands.status, commands.members):
    main.add_command(command)

if __name__ == "__main__":
    sys.exit(main())
