"""`quorumlog bench`: registered with the command line through the `quorumlog.cli.commands`
entry point, so that the product's modules never import the benchmarks."""

from __future__ import annotations

import functools
import logging
import os
import sys
import time

import click

from quorumlog.bench.remote_cli import HELP, remote_options, remote_run
from quorumlog.bench.scenarios import SCENARIOS
from quorumlog.cli.commands import client_option_decorators
from quorumlog.server.logs import configure_logging


@click.command(epilog=HELP)
@click.argument("name", type=click.Choice([*SCENARIOS, "e2e", "all"]))
@click.option("--quick", is_flag=True, help="Smallest sizes that still say something (CI, smoke).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="JSON-lines file for every figure (default: bench-results/NAME-TIME.jsonl).",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=None,
    help="sim: seeds per kind of cluster; nemesis: runs, one seed each.",
)
@click.option(
    "--seed", type=click.IntRange(min=0), default=None, help="sim, nemesis: the first seed."
)
@click.option(
    "--faults",
    default=None,
    metavar="NAME,...",
    help="nemesis: the faults to draw from (default: all; an unknown name lists them).",
)
@click.option("--steps", type=click.IntRange(min=1), default=None, help="nemesis: faults per run.")
@click.option(
    "--minutes",
    type=click.FloatRange(min=0.1),
    default=None,
    help="soak: how long each variant runs (default 30, --quick 1).",
)
@click.option(
    "--heap",
    is_flag=True,
    help="soak: trace the nodes' allocations and report the lines that grew most "
    "from the middle third's start to the end (slower nodes).",
)
@click.option("--plot", is_flag=True, help="Also write PNG charts (matplotlib) beside the figures.")
@remote_options
@functools.partial(client_option_decorators, required=False)
def bench(
    name: str,
    quick: bool,
    out: str | None,
    seeds: int | None,
    seed: int | None,
    faults: str | None,
    steps: int | None,
    minutes: float | None,
    heap: bool,
    plot: bool,
    **remote: object,
) -> None:
    """Run a benchmark scenario and print its figures beside its baselines; or, with -b or
    --kafka, run produce, consume or e2e against a cluster that already runs (below).

    \b
    Examples:
      quorumlog bench storage --quick
      quorumlog bench all --quick --plot
      quorumlog bench sim --seeds 1000 --seed 20000
      quorumlog bench soak --minutes 30 --plot
      quorumlog bench nemesis --seed 7 --faults kill-leader,partition,membership --steps 8
      quorumlog bench produce -b 10.0.0.1:7001 --size 1024 --records 64 --window 16 --duration 30
    """
    # Only the names above at import time: the scenarios load what they drive when run.
    from quorumlog.bench.report import print_table, write_jsonl
    from quorumlog.bench.scenarios import scenario

    configure_logging(level=logging.WARNING)  # simulations log thousands of elections
    run_options = remote_run(name, remote)
    if out is None and run_options is None:  # a remote run's figures are its last line
        out = os.path.join("bench-results", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    if out is not None:
        try:
            os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
            with open(out, "a"):
                pass  # fail now, not after the scenarios ran
        except OSError as exc:
            raise click.UsageError(f"cannot write the figures to {out}: {exc}") from None
    if run_options is not None:
        _run_remote(run_options, out)
        return
    names = list(SCENARIOS) if name == "all" else [name]
    results = {}
    for each in names:
        click.echo(f"running {each}{' (quick)' if quick else ''} ...", err=True)
        options: dict = {}
        if each == "sim":
            options = {"seeds": seeds, **({"first_seed": seed} if seed is not None else {})}
        if each == "soak":
            options = {"minutes": minutes, "heap": heap}
        if each == "nemesis":
            from quorumlog.bench.nemesis import parse_faults

            try:
                chosen = parse_faults(faults)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
            options = {"seeds": seeds, "seed": seed, "faults": chosen, "steps": steps}
            options["out_dir"] = os.path.dirname(out) or "."
        rows = scenario(each)(quick=quick, **options)
        print_table(f"bench {each}", rows)
        write_jsonl(out, each, rows)
        results[each] = rows
    click.echo(f"figures written to {out}", err=True)
    if plot:
        from quorumlog.bench.plots import plot as draw

        try:
            for path in draw(results, out.removesuffix(".jsonl")):
                click.echo(f"chart written to {path}", err=True)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from None
    broken = [row["seed"] for row in results.get("nemesis", []) if row["violations"]]
    if broken:  # last: the figures and charts hold the details and the replay command
        raise click.ClickException(f"nemesis: seeds {broken} broke a promise (see above)")


def _run_remote(options, out: str | None) -> None:
    from quorumlog.bench.remote import EXIT_USAGE, RunError, print_figures, run
    from quorumlog.bench.report import write_jsonl

    def echo(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()  # a progress line a second, also through a pipe

    try:
        row = run(options, echo)
    except RunError as exc:
        if exc.code == EXIT_USAGE:
            raise click.UsageError(str(exc)) from None
        raise click.ClickException(str(exc)) from None
    if out is not None:
        write_jsonl(out, f"remote-{options.workload}", [row])
    print_figures(row, echo)
