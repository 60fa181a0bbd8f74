"""Which `quorumlog serve` processes run: for tests that check nothing was left behind."""

from __future__ import annotations

import os


def serve_pids(fragment: str) -> list[str]:
    """The pids of `serve` processes whose command line holds `fragment` (a data folder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if b"serve" in command and fragment.encode() in command:
            found.append(pid)
    return found
