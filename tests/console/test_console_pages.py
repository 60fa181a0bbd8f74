"""The console's pages as pure functions: every value from the cluster is escaped, in text
and in attributes, and a page of many partitions is re-read less often."""

from __future__ import annotations

import re

from quorumlog.console import pages

HOSTILE = "<img src=x onerror=alert(1)>\"'&"


def partition(n: int, leader: int | None = 1) -> dict:
    return {
        "partition": n,
        "leader_id": leader,
        "term": 1,
        "replicas": [1, 2],
        "log_start_offset": 0,
        "commit_offset": 5,
        "size_bytes": 100,
        "replica_status": [
            {"node_id": 1, "role": "leader", "lag": 0, "flushed_offset": 5, "dirty_offset": 5},
            {"node_id": 2, "error": "unreachable"},
        ],
        "config": {HOSTILE: HOSTILE},
    }


def test_hostile_names_and_values_are_text_everywhere():
    html = pages.topic_page(1, HOSTILE, [partition(0)], allow_writes=True)
    record = {
        "offset": 3,
        "timestamp_ms": 0,
        "timestamp": HOSTILE,
        "key": HOSTILE,
        "key_encoding": "utf-8",
        "value": HOSTILE,
        "value_encoding": "utf-8",
        "headers": [{"name": HOSTILE, "value": HOSTILE, "value_encoding": "utf-8"}],
    }
    page = {
        "topic": HOSTILE,
        "partition": 0,
        "limit": 50,
        "log_start_offset": 0,
        "commit_offset": 9,
        "from_offset": 3,
        "next_offset": 4,
        "key": HOSTILE,
        "scanned": 1,
        "records": [record],
    }
    html += pages.messages_page(1, page)
    group = {
        "group": HOSTILE,
        "mode": "stream",
        "generation": 1,
        "lag": 2,
        "members": [{"member": HOSTILE, "session_timeout_ms": 1, "partitions": [[HOSTILE, 0]]}],
        "partitions": [
            {"topic": HOSTILE, "partition": 0, "committed": 1, "end": 3, "lag": 2, "owner": HOSTILE}
        ],
    }
    html += pages.group_page(1, group, [HOSTILE])
    assert "<img" not in html and "onerror=alert(1)>" not in html
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 10
    for attribute in re.findall(r'(?:href|data-\w+|title|value)="([^"]*)"', html):
        assert "<" not in attribute and "'" not in attribute, attribute


def test_a_page_of_many_partitions_is_reread_less_often():
    def every_ms(html: str) -> int:
        return int(re.search(r'data-live-ms="(\d+)"', html)[1])

    few = pages.topic_page(1, "t", [partition(n) for n in range(3)], allow_writes=False)
    many = pages.topic_page(1, "t", [partition(n) for n in range(1000)], allow_writes=False)
    huge = pages.topic_page(1, "t", [partition(n) for n in range(5000)], allow_writes=False)
    assert every_ms(few) == pages.LIVE_MS == 2000
    assert every_ms(many) == 20_000
    assert every_ms(huge) == pages.LIVE_MS_MAX


def record(value: str, encoding: str = "utf-8", key: str = "k") -> dict:
    return {
        "offset": 0,
        "timestamp_ms": 0,
        "timestamp": "1970-01-01T00:00:00.000Z",
        "key": key,
        "key_encoding": "utf-8",
        "value": value,
        "value_encoding": encoding,
        "headers": [],
    }


def messages(*records: dict, key: str | None = None, key_partition: int | None = None) -> str:
    page = {
        "topic": "t",
        "partition": 0,
        "limit": 50,
        "log_start_offset": 0,
        "commit_offset": 9,
        "from_offset": 0,
        "next_offset": 10,
        "key": key,
        "key_partition": key_partition,
        "scanned": 10,
        "records": list(records),
    }
    return pages.messages_page(1, page)


def test_unprintable_bytes_show_escaped_as_hex():
    html = messages(record("\x00\x01", key="a\x7fb"), record("ff0041", "hex"))
    assert "\x00" not in html and "\x01" not in html and "\x7f" not in html
    assert '<span class="byte" title="U+0000">\\x00</span>' in html
    assert ">\\x01</span>" in html and "a<span" in html and ">\\x7f</span>b" in html
    assert '<span class="byte" title="not UTF-8">\\xff</span>' in html  # not UTF-8: the same
    assert "\\x00</span>A" in html
    plain = messages(record('{\n\t"a": "<b>"\n}'))
    assert 'class="byte"' not in plain and "&lt;b&gt;" in plain  # newlines and tabs as they are


def test_a_key_search_says_which_partition_it_read_and_where_the_key_hashes():
    here = messages(key="k1", key_partition=0)
    assert "partition 0" in here and "hashes to (where clients put its records)" in here
    elsewhere = messages(key="k1", key_partition=1)
    assert '<a href="/topics/t/1/messages?key=k1">partition 1</a>' in elsewhere


def test_group_end_is_the_last_offset_and_the_page_says_what_committed_is():
    group = {
        "group": "g",
        "mode": "stream",
        "generation": 1,
        "lag": 0,
        "members": [],
        "partitions": [
            {"topic": "t", "partition": 0, "committed": 5, "end": 4, "next_offset": 5}
            | {"lag": 0, "owner": None}
        ],
    }
    html = pages.group_page(1, group, [])
    assert "<td>5</td><td>4</td>" in html and "End + 1 and lag 0" in html
