"""What every test shares."""

from __future__ import annotations


def pytest_collection_modifyitems(items):
    """The tests marked `slow` run first, in their order: `make test` runs the suite on two
    workers, and a test of a minute that started last would leave the other one idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
