"""The folders' layering, read from the imports themselves (docs/architecture.md, "Layers"):
the pure layers import no trio, no sockets and no actors, Raft knows nothing of the wire,
and only a group's own task touches its Raft core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE = ("raft", "log", "membership", "controller", "consumers", "transactions")
NEVER_IN_PURE = ("trio", "socket", "selectors", "asyncio", "quorumlog.actors")
# The group's task (with its append intake) and its handle are the only code that reads
# a RaftCore's state.
CORE_OWNERS = {"actors/replica/actor.py", "actors/replica/appends.py", "actors/replica/handle.py"}


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("folder", PURE)
def test_pure_layers_import_no_tasks_sockets_or_actors(folder):
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in python_files(folder)
        for module in imports_of(path)
        if any(within(module, never) for never in NEVER_IN_PURE)
    }
    assert not bad


def test_raft_imports_nothing_of_the_transport():
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in python_files("raft")
        for module in imports_of(path)
        if within(module, "quorumlog.transport")
    }
    assert not bad


def test_the_clients_import_nothing_of_the_server():
    """A client (and the Spark data source on a worker) runs without the node's code."""
    server_side = ("quorumlog.actors", "quorumlog.raft", "quorumlog.server", "quorumlog.cli")
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in python_files("quorumlog/client", "quorumlog/spark")
        for module in imports_of(path)
        if any(within(module, side) for side in server_side)
    }
    assert not bad


def core_reads(path: Path) -> list[int]:
    """Lines that read an attribute `core` of something (`group.core`, `node.core`)."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "core"
    ]


def test_only_the_group_task_touches_its_core():
    bad = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in python_files("actors", "quorumlog")
        if str(path.relative_to(ROOT)) not in CORE_OWNERS
        for line in core_reads(path)
    }
    assert not bad


def runs_on_the_core(path: Path) -> list[str]:
    """What a module does to reach a Raft core from outside: import RaftCore, or run a
    function in a replica's task (`in_task`, `in_task_when`)."""
    tree = ast.parse(path.read_text(), str(path))
    found = [m for m in imports_of(path) if within(m, "quorumlog.raft.core")]
    return found + [
        f"{node.attr} at line {node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("in_task", "in_task_when")
    ]


def test_other_actors_ask_a_replica_for_what_they_need_and_never_run_code_on_its_core():
    """A transfer, a configuration change, a back-fill: the replica's handle takes each as
    a request of its own (actors/replica/handle.py)."""
    bad = {
        f"{path.relative_to(ROOT)}: {what}"
        for path in python_files("actors", "quorumlog")
        if not path.relative_to(ROOT).is_relative_to("actors/replica")
        for what in runs_on_the_core(path)
    }
    assert not bad


# What writes a node's log (raft/storage.py's LogStorage and the log's own flush).
LOG_WRITES = {"append_placed", "truncate_suffix", "reset", "backfill", "write_backfill", "flush"}


def log_writes(path: Path) -> list[str]:
    """Calls of a stored log's writes: on anything reached through `.stored`, and the
    writes no core view has (`append_placed`, `write_backfill`) on anything, but in
    `LogWrites.apply`, the one place the replica's task applies a round's writes."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(fn, ast.FunctionDef) or fn.name == "apply":
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name, receiver = node.func.attr, ast.unparse(node.func.value)
                stored = receiver.endswith("stored") or ".stored." in receiver
                if name in LOG_WRITES and (stored or name in ("append_placed", "write_backfill")):
                    found.append(f"{receiver}.{name} at line {node.lineno}")
    return found


def test_the_core_writes_nothing_itself():
    """A core's writes go out in its Ready (raft/raft_log.py `LogWrites`)."""
    bad = {f"{p.relative_to(ROOT)}: {w}" for p in python_files("raft") for w in log_writes(p)}
    assert not bad


# The folders, each a package: a folder may import those below it, never one that imports it
# back (type hints included: a cycle through them still ties the folders together).
FOLDERS = {
    "raft": "quorumlog.raft",
    "log": "quorumlog.log",
    "membership": "quorumlog.membership",
    "controller": "quorumlog.controller",
    "consumers": "quorumlog.consumers",
    "transactions": "quorumlog.transactions",
    "transport": "quorumlog.transport",
    "actors/services": "quorumlog.actors.services",
    "actors/replica": "quorumlog.actors.replica",
    "actors/cluster": "quorumlog.actors.cluster",
    "actors/coordinator": "quorumlog.actors.coordinator",
    "actors/kafka": "quorumlog.actors.kafka",
    "actors/node": "quorumlog.actors.node",
    "quorumlog/client": "quorumlog.client",
    "quorumlog/console": "quorumlog.console",
    "quorumlog/server": "quorumlog.server",
    "quorumlog/cli": "quorumlog.cli",
    "quorumlog/spark": "quorumlog.spark",
    "bench": "quorumlog.bench",
}


def folder_imports(folders: dict[str, str]) -> dict[str, set[str]]:
    """Which other folders each folder's modules import (an imported name counts as a
    module too: `from quorumlog import console` imports the folder console)."""

    def folder_of(module: str) -> str | None:
        owners = [f for f, package in folders.items() if within(module, package)]
        return max(owners, key=lambda f: len(folders[f]), default=None)

    graph: dict[str, set[str]] = {}
    for folder in folders:
        graph[folder] = set()
        for path in python_files(folder):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                graph[folder] |= {folder_of(n) for n in names} - {None, folder}
    return graph


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Some cycle of the graph (its nodes, the first repeated at the end), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for after in sorted(graph.get(node, ())):
            if (cycle := visit(after, [*path, node])) is not None:
                return cycle
        done.add(node)
        return None

    return next((c for node in sorted(graph) if (c := visit(node, [])) is not None), None)


def test_the_folders_import_each_other_without_cycles():
    cycle = a_cycle(folder_imports(FOLDERS))
    assert cycle is None, " -> ".join(cycle)


# The programs that make a node: they alone, and the node's own folder, import `Node`.
NODE_MAKERS = {"quorumlog/server/server.py", "bench/sim_node.py", "bench/sim_cluster.py"}
NODE = "quorumlog.actors.node.node"


def test_the_services_take_a_face_of_the_node_and_not_the_node():
    """The controller actor, the coordinator, the Kafka listener, ... take the narrow
    protocol they need (actors/cluster/member.py and beside each), type hints included."""
    bad = {
        f"{path.relative_to(ROOT)}"
        for path in python_files(*FOLDERS)
        if not path.relative_to(ROOT).is_relative_to("actors/node")
        and str(path.relative_to(ROOT)) not in NODE_MAKERS
        and any(within(m, NODE) for m in imports_of(path))
    }
    assert not bad


def module_imports(folders: dict[str, str]) -> dict[str, set[str]]:
    """Which of the project's modules each of its modules imports (type hints included;
    an imported name counts as a module when it is one)."""
    paths = {}
    for folder, package in folders.items():
        for path in python_files(folder):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            paths[".".join((package, *parts)).removesuffix(".__init__")] = path
    graph = {}
    for module, path in paths.items():
        graph[module] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            graph[module] |= {n for n in names if n in paths and n != module}
    return graph


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or not."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        if (module := todo.pop()) not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    return seen


def test_nothing_the_node_imports_imports_it_back():
    """The node sits on top of its services: no cycle of imports runs through it (one
    tied 29 modules together through type hints)."""
    graph = module_imports(FOLDERS)
    back = sorted(m for m in reaches(graph, NODE) if NODE in reaches(graph, m))
    assert not back


# Modules of the standard library and of ours that reach files, sockets or tasks.
DOES_IO = ("os", "shutil", "pathlib", "io", "tempfile", "mmap", "socket", "trio", "asyncio")


def test_raft_reaches_nothing_that_does_io():
    """The core is a state machine: nothing it imports, however indirectly, opens a file,
    a socket or a task (its writes go out in its Ready; log/metadata_store.py writes its
    hard state). Its imports of the log are values: the batch format, the metadata."""
    graph = module_imports(FOLDERS)
    raft = [m for m in graph if within(m, "quorumlog.raft")]
    reached = set(raft).union(*(reaches(graph, m) for m in raft))
    bad = sorted(
        f"{module}: {found}"
        for module in reached
        for found in imports_of(module_path(module))
        if any(within(found, io) for io in DOES_IO)
    )
    assert not bad


def module_path(module: str) -> Path:
    folder = max((f for f, p in FOLDERS.items() if within(module, p)), key=len)
    rest = module.removeprefix(FOLDERS[folder]).lstrip(".").replace(".", "/")
    path = ROOT / folder / f"{rest}.py"
    return path if rest and path.exists() else ROOT / folder / rest / "__init__.py"


def test_the_checks_can_fail(tmp_path):
    """The readers above find what they look for."""
    sample = tmp_path / "sample.py"
    sample.write_text("import trio\nfrom quorumlog.transport import codec\nx = group.core.term\n")
    assert imports_of(sample) == {"trio", "quorumlog.transport"}
    assert core_reads(sample) == [3]
    sample.write_text("from quorumlog.raft.core import RaftCore\nawait g.in_task(f)\n")
    assert runs_on_the_core(sample) == ["quorumlog.raft.core", "in_task at line 2"]
    sample.write_text(
        "def step(self):\n    self.log.stored.reset(1, 0)\n    log.write_backfill(0, [])\n"
    )
    assert log_writes(sample) == ["self.log.stored.reset at line 2", "log.write_backfill at line 3"]
    assert a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert a_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert reaches({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, "a") == {"a", "b", "c"}
    assert NODE in module_imports(FOLDERS)["quorumlog.server.server"]
    assert "os" in imports_of(module_path("quorumlog.log.metadata_store"))
    assert module_path("quorumlog.raft") == ROOT / "raft" / "__init__.py"
