"""What `pip install` puts on a user's machine: one `quorumlog` package and nothing generic.

The design's folders (log/, raft/, actors/, ...) stay at the top of the repository but install
as `quorumlog.log`, `quorumlog.raft`, ...; a bare `import log` that works in a checkout would
break an installed wheel, so the product's own imports are checked too.
"""

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import quorumlog

ROOT = Path(__file__).resolve().parents[1]
DESIGN_FOLDERS = [
    "raft", "log", "transport", "actors", "membership", "controller", "consumers", "bench",
]  # fmt: skip


NOT_SOURCE = [
    ".*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "tests",
    "docs",
    "quorumlog-dev",
    "bench-results",
]


def _product_files() -> list[Path]:
    return [p for folder in ["quorumlog", *DESIGN_FOLDERS] for p in (ROOT / folder).rglob("*.py")]


# Served from the installed package by every node's console.
STATIC_FILES = sorted((ROOT / "quorumlog" / "console" / "static").iterdir())


def test_the_wheel_installs_one_quorumlog_package_holding_every_module(tmp_path):
    # Built from a copy: setuptools reuses a build/ folder it finds, which would hide a module
    # left out of the package list.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(*NOT_SOURCE),
    )
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    # `make run` shows what setuptools says: a package left out of the list is 40 lines.
    assert "would be ignored" not in build.stdout + build.stderr, build.stderr
    (wheel,) = wheels.glob("quorumlog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    top_level = {name.split("/")[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"quorumlog"}

    expected = set()
    for path in [*_product_files(), *STATIC_FILES]:
        relative = path.relative_to(ROOT).as_posix()
        expected.add(relative if relative.startswith("quorumlog/") else f"quorumlog/{relative}")
    assert expected - set(names) == set()

    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "bench = quorumlog.bench.cli:bench" in text


def test_no_code_imports_a_design_folder_by_its_bare_name():
    bare = []
    for path in [
        *_product_files(),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "examples").rglob("*.py"),
    ]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            bare += [
                f"{path.relative_to(ROOT)}:{node.lineno} {m}"
                for m in modules
                if m.split(".")[0] in DESIGN_FOLDERS
            ]
    assert bare == []


def test_python_without_the_package_is_told_why_not_a_missing_submodule(tmp_path):
    """From a folder holding the repository's `quorumlog/` (a clone's parent, a Spark
    worker started there), an interpreter without the package installed says so."""
    source = os.path.dirname(os.path.dirname(os.path.abspath(quorumlog.__file__)))
    script = f"import sys; sys.path.insert(0, {source!r}); import quorumlog"
    bare = subprocess.run(
        [sys.executable, "-S", "-c", script],  # -S: no site-packages, so no package
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert bare.returncode == 1
    assert "quorumlog is not installed for" in bare.stderr.splitlines()[-1], bare.stderr


def test_a_command_loads_no_test_library_and_writes_nothing_where_it_runs(tmp_path):
    """kio imports hypothesis when it can (this venv has it), which then writes
    `.hypothesis/` into the working directory: a node must do neither."""
    code = (
        "import sys, quorumlog.cli.main, quorumlog.actors.kafka.api;"
        "assert 'kio' in sys.modules;"
        "print(sys.modules.get('hypothesis'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert (out.returncode, out.stdout.strip()) == (0, "None"), out.stderr
    assert list(tmp_path.iterdir()) == []
