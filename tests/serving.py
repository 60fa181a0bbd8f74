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


def deaf_to_ctrl_c(pid: int) -> str | None:
    """Why a process cannot hear SIGINT, if it cannot: a child inherits an ignored or
    blocked SIGINT from its parent, and a test that sends it Ctrl-C must not blame it."""
    with open(f"/proc/{pid}/status") as f:
        masks = dict(line.split(":\t", 1) for line in f if line.startswith(("SigIgn", "SigBlk")))
    bit = 1 << (2 - 1)  # SIGINT is signal 2
    for field, what in (("SigIgn", "ignores"), ("SigBlk", "blocks")):
        if int(masks[field], 16) & bit:
            return f"pid {pid} {what} SIGINT, as it inherited: Ctrl-C cannot reach it"
    return None
