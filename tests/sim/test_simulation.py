"""Seeded simulations of whole clusters; each seed runs twice and must replay exactly.

Replay a failing seed with:  .venv/bin/python -c "from tests.sim.harness import run_seed; run_seed(SEED, size=N)"
More seeds: quorumlog bench sim --seeds N
"""

from __future__ import annotations

import pytest

from tests.sim.harness import run_seed

SEEDS_3 = range(200)
SEEDS_5 = range(1000, 1100)


def check_seed(seed: int, size: int) -> None:
    first = run_seed(seed, size=size)
    second = run_seed(seed, size=size)
    assert first == second, f"seed {seed} did not replay: lost determinism"


@pytest.mark.parametrize("seed", SEEDS_3)
def test_three_nodes(seed):
    check_seed(seed, 3)


@pytest.mark.parametrize("seed", SEEDS_5)
def test_five_nodes(seed):
    check_seed(seed, 5)
