"""How the command line's tables are printed for a person and for a script.

A table's lines are parsed by scripts (and by the contract's black-box tests), so a pipe
gets the rows alone, exactly as docs/cli.md shows them; a terminal gets a
header row over aligned columns. `--header/--no-header` forces either way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import click


def header_option(command: Callable) -> Callable:
    """`--header/--no-header`: print the header row or not (default: when stdout is a
    terminal)."""
    return click.option(
        "--header/--no-header",
        "header",
        default=None,
        help="Print a header row (default: only when the output is a terminal).",
    )(command)


def print_table(
    header: Sequence[str], rows: Sequence[Sequence[object]], shown: bool | None
) -> bool:
    """Rows as space-separated lines ("-" for None); with a header (`shown`, or when
    `shown` is None and stdout is a terminal), a header row above columns padded to line
    up: `line.split()` reads the same fields either way. Returns whether the header was
    printed."""
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    if shown is None:
        shown = sys.stdout.isatty()
    if not shown:
        for row in cells:
            click.echo(" ".join(row))
        return False
    widths = [max(len(r[i]) for r in [list(header), *cells]) for i in range(len(header))]
    for row in [list(header), *cells]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return True
