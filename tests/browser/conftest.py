"""A headless Chromium driven by Playwright: Debian's package (`make test` installs it),
launched by path, since Playwright's own browser download cannot be fetched here."""

from __future__ import annotations

import os
import shutil

import pytest

# As the machine's probe starts it: no sandbox (root), and no calls out to Google's hosts,
# which a closed network refuses many at a time.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    return os.environ.get("QUORUMLOG_CHROMIUM") or shutil.which("chromium")


# Per module, not per session: Playwright's sync API keeps an asyncio loop running in the
# main thread while it is open, and tests after these use asyncio.run (aiokafka, say).
@pytest.fixture(scope="module")
def browser():
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium: `make test` installs Debian's chromium where apt-get can")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    yield page
    context.close()


def screenshot(page, name: str) -> None:
    """Saved where QUORUMLOG_SCREENSHOTS names a folder (the pictures of the README and docs/console.md, in docs/img/)."""
    folder = os.environ.get("QUORUMLOG_SCREENSHOTS")
    if folder:
        page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)
