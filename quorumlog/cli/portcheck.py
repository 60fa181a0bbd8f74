"""Whether a port on 127.0.0.1 is free for a node, and if not, who holds it: for `dev`,
which checks every port it would use before it starts anything.

The holder is found through Linux's /proc (the socket's inode in /proc/net/tcp, then the
process with that inode among its open files); elsewhere, or for another user's process,
the answer is only "in use".
"""

from __future__ import annotations

import os
import socket

TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
DEV_DATA_DEFAULT = "quorumlog-dev"  # dev's --data when none is given
TIME_WAIT = "06"  # /proc/net/tcp's state of a closed connection: binding ignores it (SO_REUSEADDR)


def in_use(port: int) -> bool:
    """Whether a node could not listen on 127.0.0.1:`port` now: a bind tried and let go, as
    the node's listener binds (SO_REUSEADDR, so a recently closed connection does not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def holder(port: int) -> str | None:
    """Who holds `port`, in words (see `describe`); None when it cannot tell."""
    pid = _pid_of(_socket_inodes(port))
    return None if pid is None else describe(pid)


def describe(pid: int) -> str:
    """A process in words: "another quorumlog dev (pid P, data in DIR)" (also for one of
    its nodes), "quorumlog node N (pid P, data in DIR)", or "pid P (COMMAND)"."""
    args = _cmdline(pid)
    if _is_quorumlog(args) and "dev" in args:
        data = _path_of(pid, _flag(args, "--data") or DEV_DATA_DEFAULT)
        return f"another quorumlog dev (pid {pid}, data in {data})"
    if _is_quorumlog(args) and "serve" in args:
        data = _path_of(pid, _flag(args, "--data") or "?")
        parent = _parent(pid)
        if parent is not None and _is_quorumlog(_cmdline(parent)) and "dev" in _cmdline(parent):
            root = os.path.dirname(data)
            return f"another quorumlog dev (pid {parent}, data in {root})"
        return f"quorumlog node {_flag(args, '--id') or '?'} (pid {pid}, data in {data})"
    return f"pid {pid} ({' '.join(args)[:80] or '?'})"


def _socket_inodes(port: int) -> set[str]:
    """The inodes of the TCP sockets bound to `port` (any address, any state but TIME_WAIT)."""
    inodes = set()
    for table in TCP_TABLES:
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if len(fields) < 10 or fields[3] == TIME_WAIT or fields[9] == "0":
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _pid_of(inodes: set[str]) -> int | None:
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # another user's process, or gone
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return int(pid)
            except OSError:
                continue
    return None


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _path_of(pid: int, path: str) -> str:
    """`path` as process `pid` means it (relative to its working directory)."""
    try:
        return os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
    except OSError:
        return path


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # pid (comm) state ppid ...: comm may hold spaces and parentheses
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _is_quorumlog(args: list[str]) -> bool:
    return any("quorumlog" in a for a in args[:3])


def _flag(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None
