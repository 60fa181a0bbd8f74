"""One node's budget for its leaders' caches of recent batches (log/tailcache.py): the caches
appended to least recently are emptied, whole, once they hold more together; what they let
go is read from the files."""

from __future__ import annotations

from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.tailcache import TailBudget, TailCache
from tests.log.helpers import batch_of, open_log, read_all


def test_the_least_recently_appended_cache_is_emptied_first():
    budget = TailBudget(bytes_max=1000)
    a, b, c = (TailCache(budget=budget) for _ in range(3))
    a.add(0, 0, b"a" * 400)
    b.add(0, 0, b"b" * 400)
    a.add(1, 1, b"a" * 100)  # a is now the more recent of the two
    assert (budget.bytes, budget.caches) == (900, 2)
    c.add(0, 0, b"c" * 400)
    assert (a.bytes, b.bytes, c.bytes) == (500, 0, 400), "b was appended to least recently"
    assert b.read(0, 1000, 0) is None and a.read(0, 1000, 1).data == b"a" * 400 + b"a" * 100
    assert (budget.bytes, budget.caches) == (900, 2)


def test_a_cache_alone_keeps_to_its_own_limit_only():
    budget = TailBudget(bytes_max=1000)
    cache = TailCache(bytes_max=1500, budget=budget)
    for offset in range(4):
        cache.add(offset, offset, b"x" * 500)
    assert cache.bytes == 1500 and budget.bytes == 1500  # nothing else to empty
    other = TailCache(budget=budget)
    other.add(0, 0, b"y" * 10)
    assert cache.bytes == 0 and budget.bytes == 10


def test_truncate_and_clear_give_back_what_they_held():
    budget = TailBudget(bytes_max=10_000)
    cache = TailCache(budget=budget)
    for offset in range(5):
        cache.add(offset, offset, b"z" * 100)
    cache.truncate(3)
    assert (cache.bytes, budget.bytes, budget.caches) == (300, 300, 1)
    cache.clear()
    assert (budget.bytes, budget.caches) == (0, 0)


def test_logs_sharing_a_budget_read_what_it_let_go_from_their_files():
    fs = MemoryFileSystem()
    budget = TailBudget(bytes_max=3_000)
    logs = [open_log(fs, f"/data/{n}/log", tail_budget=budget) for n in range(3)]
    written: dict[int, list[bytes]] = {n: [] for n in range(3)}
    for round_ in range(20):
        for n, log in enumerate(logs):
            values = [b"log%d-round%d-" % (n, round_) + b"v" * 100]
            log.append([batch_of(*values)], term=1)
            written[n] += values
        assert budget.bytes <= 3_000
    for n, log in enumerate(logs):
        assert [v for _, v in read_all(log)] == written[n]
    for log in logs:
        log.close()
    assert (budget.bytes, budget.caches) == (0, 0), "a closed log holds nothing"
