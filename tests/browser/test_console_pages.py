"""The web console in a real browser against real `serve` processes: what its pages show is
what the command line says, records are shown as text (a `<script>` value never runs), and
the cluster page follows a member's death without a reload."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from quorumlog import Client, Consumer, Record
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from tests.browser.conftest import screenshot
from tests.process.test_membership import ql

ORDER = {"id": 7, "items": ["tea", "scones"], "paid": True}
SCRIPT = "<script>window.pwned = 1</script>"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = ProcessCluster(str(tmp_path_factory.mktemp("console")), http_ports=free_ports(3))
    c.http_allow_writes = True  # the topic page's form, for its picture
    c.start_all()
    with Client(c.brokers, timeout=30) as client:
        client.create_topic("orders", partitions=3)
    yield c
    c.stop_all()


def url(c: ProcessCluster, path: str, node_id: int = 1) -> str:
    return f"http://127.0.0.1:{c.http_ports[node_id - 1]}{path}"


def test_a_topic_page_lists_its_partitions_and_leaders(cluster, page):
    with Client(cluster.brokers, timeout=30) as client:
        described = client.describe_topic("orders")
    page.goto(url(cluster, "/topics/orders", node_id=2))
    expect(page.locator("table.partitions tbody tr")).to_have_count(3)
    for p in described:
        row = page.locator(f'tr[data-partition="{p["partition"]}"]')
        expect(row.locator("td").nth(1)).to_have_text(str(p["leader_id"]))
        for replica in p["replicas"]:
            expect(row.locator(f'[data-replica="{replica}"]')).to_contain_text("lag 0")
    expect(page.locator("table.config")).to_contain_text("retention.ms")
    screenshot(page, "console-topic")


def test_the_messages_page_shows_records_as_text(cluster, page):
    with Client(cluster.brokers, timeout=30) as client:
        first = client.append(
            [
                Record(json.dumps(ORDER).encode(), key=b"order-7", headers=[("via", b"test")]),
                Record(SCRIPT.encode(), key=b"<i>key</i>"),
            ],
            topic="orders",
            partition=1,
        )
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(url(cluster, f"/topics/orders/1/messages?offset={first}"))
    order = page.locator(f'tr[data-offset="{first}"]')
    expect(order).to_contain_text("order-7")
    expect(order).to_contain_text("via: test")
    expect(order.locator("pre.value")).to_have_text(json.dumps(ORDER, indent=2))
    script = page.locator(f'tr[data-offset="{first + 1}"]')
    expect(script.locator("pre.value")).to_have_text(SCRIPT)
    expect(script.locator("td").nth(2)).to_have_text("<i>key</i>")
    assert page.evaluate("window.pwned") is None and not dialogs
    page.goto(url(cluster, "/topics/orders/1/messages?key=order-7"))
    expect(page.locator("table.records tbody tr")).to_have_count(1)
    page.goto(url(cluster, f"/topics/orders/1/messages?offset={first}"))
    screenshot(page, "console-messages")


def test_a_group_page_shows_the_lag_group_describe_shows(cluster, page):
    with Client(cluster.brokers, timeout=30) as client:
        for partition in range(3):
            client.append([b"x%d" % i for i in range(5)], topic="orders", partition=partition)
    with Consumer(cluster.brokers, "billing", ["orders"], timeout=30) as consumer:
        consumer.poll(4, 10.0)
        consumer.commit()
    with Client(cluster.brokers, timeout=30) as client:
        client.append([b"later"] * 3, topic="orders", partition=0)
    out = ql("group", "-b", cluster.brokers, "describe", "billing", "--json")
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    total = sum(r["lag"] or 0 for r in rows)
    assert total > 0
    page.goto(url(cluster, "/groups/billing", node_id=3))
    expect(page.locator("#total-lag")).to_have_text(str(total))
    for r in rows:
        row = page.locator(f'tr[data-topic="orders"][data-partition="{r["partition"]}"]')
        expect(row.locator(".lag")).to_have_text("-" if r["lag"] is None else str(r["lag"]))
    page.goto(url(cluster, "/groups"))
    expect(page.locator("table.groups")).to_contain_text("billing")
    page.goto(url(cluster, "/groups/billing", node_id=3))
    screenshot(page, "console-group")


def test_the_cluster_page_marks_a_killed_member_down_without_a_reload(cluster, page):
    page.goto(url(cluster, "/"))
    expect(page.locator('tr[data-state="up"]')).to_have_count(3)
    page.evaluate("window.notReloaded = true")
    cluster.kill(3)
    down = page.locator('tr[data-node="3"]')
    expect(down).to_have_attribute("data-state", "down", timeout=10_000)
    expect(page.locator('tr[data-state="up"]')).to_have_count(2)
    # Every partition had a replica on node 3: all of them are short of one now.
    partitions = page.locator('[data-card="Partitions"] .value').inner_text()
    under = page.locator('[data-card="Under-replicated"] .value')
    expect(under).to_have_text(partitions, timeout=10_000)
    assert page.evaluate("window.notReloaded") is True
    screenshot(page, "console-cluster")
