"""`quorumlog demo`'s closing table: headed, figures above checks."""

import io

from rich.console import Console

from quorumlog.cli.demo import Tour, _report


def test_the_summary_table_has_a_header_row():
    out = io.StringIO()
    tour = Tour(Console(file=out, width=80, color_system=None))
    tour.figures.append(("acks=quorum", "50,000 records/s"))
    tour.checks.append(("node 1 was elected leader", True))
    _report(tour)
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == ["what", "result"], lines
