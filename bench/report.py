"""What every benchmark prints and stores: rows of figures, machine facts, a table."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable
from importlib import metadata

from rich.console import Console
from rich.table import Table


def machine_facts() -> dict:
    versions = {}
    for package in ("trio", "msgpack", "zstandard", "crc32c"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def write_jsonl(path: str, scenario: str, rows: list[dict]) -> None:
    facts = machine_facts()
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps({"scenario": scenario, **row, "machine": facts}) + "\n")


def print_table(title: str, rows: list[dict], file=None) -> None:
    if not rows:
        return
    # Series (timelines) go to the JSON lines and the plots, not to the table.
    columns = list(
        dict.fromkeys(k for row in rows for k, v in row.items() if not isinstance(v, list | dict))
    )
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if _numeric(rows, column) else "left")
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in columns))
    Console(file=file or sys.stdout, width=200).print(table)


def _numeric(rows: list[dict], column: str) -> bool:
    return all(isinstance(r.get(column), int | float) for r in rows if r.get(column) is not None)


def cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)
