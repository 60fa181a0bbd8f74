"""The `quorumlog` command line."""

from __future__ import annotations

import os
import sys
import time

import click

from bench.report import print_table, write_jsonl
from bench.scenarios import SCENARIOS, scenario

EXIT_OPERATIONAL = 1
EXIT_USAGE = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """quorumlog: a replicated log service (Raft, trio, msgpack over TCP)."""


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


if __name__ == "__main__":
    sys.exit(main())
