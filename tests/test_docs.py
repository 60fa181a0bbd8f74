"""The documentation holds together: every relative link in the README, the changelog and
docs/ (images included) leads to a file or folder of the repository, and a link with an
anchor to a heading of its target (GitHub's slugs); the README stays a short page for a
newcomer; every Python block compiles (tests/process/test_readme.py runs them); and the top
of the repository holds only what belongs there (scratch outputs, such as a bench run's
`--out` file, go to bench-results/ or a docs page's data). Pure: reads files, runs nothing."""

from __future__ import annotations

import glob
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
README_MAX_LINES = 320
# What the top of the repository may hold (tracked, or untracked and not ignored).
ROOT_ALLOWED = {
    ".ci",
    ".gitignore",
    "CHANGELOG.md",
    "Makefile",
    "README.md",
    "constraints.txt",
    "pyproject.toml",
    # the layers and the project's folders
    "actors",
    "bench",
    "consumers",
    "controller",
    "docs",
    "examples",
    "java",
    "log",
    "membership",
    "quorumlog",
    "raft",
    "tests",
    "transactions",
    "transport",
}

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def pages() -> list[str]:
    found = ["README.md", "CHANGELOG.md"]
    found += sorted(
        os.path.relpath(p, ROOT).replace(os.sep, "/")
        for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    )
    return found


def read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked out."""
    lines, fence = [], None
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
            continue
        lines.append(CODE_SPAN.sub("code", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: str) -> set[str]:
    """Every heading's anchor, with GitHub's -1, -2 ... for repeated ones."""
    seen: dict[str, int] = {}
    found = set()
    fence = None
    for line in read(page).splitlines():
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
            continue
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: str) -> list[str]:
    return [target for line in prose_lines(read(page)) for target in LINK.findall(line)]


def relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def broken_links(page: str) -> list[str]:
    broken = []
    for target in links(page):
        if not relative(target):
            continue
        path, _, anchor = target.partition("#")
        path = unquote(path)
        resolved = (
            os.path.join(ROOT, page)
            if not path
            else os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path))
        )
        if os.path.commonpath([resolved, ROOT]) != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not os.path.exists(resolved):
            broken.append(f"{target}: no such file")
        elif (
            anchor
            and resolved.endswith(".md")
            and anchor not in anchors(os.path.relpath(resolved, ROOT))
        ):
            broken.append(f"{target}: no heading with that anchor")
    return broken


@pytest.mark.parametrize("page", pages())
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_link_check_sees_links_and_anchors():
    # A check that found nothing would pass for nothing.
    assert "docs/cli.md" in links("README.md")
    assert "start-nodes-by-hand" not in anchors("docs/operating.md")
    assert "starting-nodes-by-hand" in anchors("docs/operating.md")
    assert slug("One client: the blocking `Client` is the `AsyncClient`") == (
        "one-client-the-blocking-client-is-the-asyncclient"
    )
    assert slug('"Unknown topic" comes only from the leader') == (
        "unknown-topic-comes-only-from-the-leader"
    )


def test_every_docs_page_is_reachable_from_the_readme_or_the_docs_index():
    linked = set()
    for page in ("README.md", "docs/README.md", "docs/decisions/README.md"):
        for target in links(page):
            if relative(target):
                path = target.partition("#")[0]
                if path:
                    full = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path))
                    linked.add(os.path.relpath(full, ROOT).replace(os.sep, "/"))
    unlinked = [
        p for p in pages() if p.startswith("docs/") and p not in linked | {"docs/README.md"}
    ]
    assert unlinked == []


def test_the_readme_is_short():
    assert len(read("README.md").splitlines()) <= README_MAX_LINES


def test_every_python_block_compiles():
    for page in pages():
        for number, block in enumerate(PYTHON_BLOCK.findall(read(page)), 1):
            compile(block, f"{page}, Python block {number}", "exec")


def test_nothing_stray_at_the_top_of_the_repository():
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    top = {line.split("/", 1)[0] for line in listed.splitlines() if line}
    assert top - ROOT_ALLOWED == set()


DOCS_NAMED_IN_CODE = re.compile(r"\bdocs/[\w/.-]+\.md")


def test_every_docs_page_the_code_names_exists():
    """Comments and messages send readers to docs pages: the pages are there."""
    sources = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    missing = {
        f"{path}: {page}"
        for path in sources
        if os.path.exists(os.path.join(ROOT, path))
        for page in DOCS_NAMED_IN_CODE.findall(Path(ROOT, path).read_text())
        if not os.path.exists(os.path.join(ROOT, page))
    }
    assert not missing
