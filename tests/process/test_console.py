"""The web console over plain HTTP against real `serve` processes: its JSON is the
command line's, its pages escape what records hold, writes and the secret are enforced,
and bad requests are answered without hurting the node. (Pages in a real browser:
tests/browser/.)"""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from quorumlog import Client, Consumer, Record
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from tests.process.test_membership import ql


def get(url: str, password: str | None = None, data: bytes | None = None, headers=None):
    """(status, headers, body) of one request; no redirect is followed."""
    request = urllib.request.Request(url, data=data, headers=headers or {})
    if password is not None:
        token = base64.b64encode(f"anyone:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=20) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()
    except urllib.error.URLError:
        return None, None, None  # not listening (yet)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def cli_json(*args: str) -> list[dict]:
    out = ql(*args, "--json")
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    c = ProcessCluster(str(tmp_path_factory.mktemp("console")), http_ports=free_ports(3))
    c.start_all()
    with Client(c.brokers, timeout=30) as client:
        client.create_topic("web", partitions=2)
        client.append(
            [
                Record(b"plain text", key=b"k1", headers=[("source", b"test")]),
                Record(b'{"user": "ada", "tags": [1, 2]}', key=b"k2"),
                Record(b"<script>alert('x')</script>", key=b"<b>k3</b>"),
                Record(bytes([0xFF, 0x00, 0xC3]), key=b"k1"),
            ],
            topic="web",
            partition=0,
        )
    yield c
    c.stop_all()


def url(c: ProcessCluster, path: str, node_id: int = 1) -> str:
    return f"http://127.0.0.1:{c.http_ports[node_id - 1]}{path}"


def test_the_api_gives_the_objects_the_command_line_prints(console):
    status, _, body = get(url(console, "/api/topics"))
    assert status == 200
    assert json.loads(body) == cli_json("topic", "-b", console.brokers, "list")
    status, _, body = get(url(console, "/api/topics/web", node_id=2))
    described = cli_json("topic", "-b", console.brokers, "describe", "web")
    stable = ("topic", "partition", "replicas", "config", "log_start_offset")
    assert status == 200
    assert [{k: p[k] for k in stable} for p in json.loads(body)] == [
        {k: p[k] for k in stable} for p in described
    ]
    for p in json.loads(body):  # each replica's own account: role, offsets and lag
        replicas = {r["node_id"]: r for r in p["replica_status"]}
        assert list(replicas) == p["replicas"]
        assert replicas[p["leader_id"]]["role"] == "leader"
        assert replicas[p["leader_id"]]["size_bytes"] == p["size_bytes"] > 0
        assert all(r["flushed_offset"] <= r["dirty_offset"] for r in replicas.values())
    cluster = json.loads(get(url(console, "/api/cluster"))[2])
    assert sorted(m["node_id"] for m in cluster["members"]) == [1, 2, 3]
    assert cluster["partitions"] == 3 and cluster["partitions_without_leader"] == 0
    assert cluster["controller_id"] in (1, 2, 3)
    statuses = json.loads(get(url(console, "/api/status"))[2])
    assert {s["node_id"] for s in statuses} == {1, 2, 3}


def test_records_come_as_text_json_or_hex(console):
    status, _, body = get(url(console, "/api/topics/web/0/messages?offset=0"))
    assert status == 200
    records = json.loads(body)["records"]
    assert [r["key"] for r in records] == ["k1", "k2", "<b>k3</b>", "k1"]
    assert records[0]["headers"] == [{"name": "source", "value": "test", "value_encoding": "utf-8"}]
    assert json.loads(records[1]["value_pretty"]) == {"user": "ada", "tags": [1, 2]}
    assert "\n" in records[1]["value_pretty"]
    assert records[3]["value"] == "ff00c3" and records[3]["value_encoding"] == "hex"
    last = json.loads(get(url(console, "/api/topics/web/0/messages?last=2"))[2])["records"]
    assert [r["offset"] for r in last] == [r["offset"] for r in records[-2:]]
    found = json.loads(get(url(console, "/api/topics/web/0/messages?key=k1"))[2])["records"]
    assert [r["offset"] for r in found] == [records[0]["offset"], records[3]["offset"]]
    since = records[0]["timestamp"]
    timed = json.loads(get(url(console, f"/api/topics/web/0/messages?time={since}"))[2])
    assert timed["records"][0]["offset"] == records[0]["offset"]


def test_a_key_search_page_goes_to_the_partition_the_key_hashes_to(console):
    # k1 hashes to partition 1 of 2; the fixture put its records in partition 0 by choice.
    status, headers, _ = get(url(console, "/topics/web/0/messages?key=k1"))
    assert status == 303 and headers["location"] == "/topics/web/1/messages?key=k1"
    status, _, body = get(url(console, "/topics/web/1/messages?key=k1"))
    assert status == 200 and b"records of partition 1 for key" in body
    status, _, body = get(url(console, "/topics/web/0/messages?key=k1&here=1"))
    assert status == 200 and b'href="/topics/web/1/messages?key=k1">partition 1</a>' in body
    assert body.count(b"<tr data-offset=") == 2


def test_pages_escape_keys_values_and_headers(console):
    status, headers, body = get(url(console, "/topics/web/0/messages?offset=0"))
    assert status == 200 and headers["content-type"].startswith("text/html")
    page = body.decode()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<script>alert" not in page and "<b>k3</b>" not in page
    assert "&lt;b&gt;k3&lt;/b&gt;" in page
    assert "script-src 'self'" in headers["content-security-policy"]
    for path in ("/", "/topics", "/topics/web", "/groups"):
        status, _, body = get(url(console, path, node_id=3))
        assert status == 200, path
    assert b"web" in get(url(console, "/topics"))[2]


def test_bad_requests_get_clear_answers_and_the_node_serves_on(console):
    assert get(url(console, "/topics/nope"))[0] == 404
    status, _, body = get(url(console, "/api/topics/nope"))
    assert status == 404 and "nope" in json.loads(body)["error"]
    assert get(url(console, "/api/topics/web/7/messages"))[0] == 404
    assert get(url(console, "/api/topics/web/0/messages?offset=x"))[0] == 400
    assert get(url(console, "/api/topics/web/0/messages?time=yesterday"))[0] == 400
    assert get(url(console, "/api/groups/nope"))[0] == 404
    assert get(url(console, "/no/such/page"))[0] == 404
    assert get(url(console, "/api/topics/web/99999999999999999999999/messages"))[0] == 400
    assert get(url(console, "/api/topics/web/0/messages?offset=99999999999999999999"))[0] == 400
    status, _, body = get(url(console, "/api/no/such/call"))
    assert status == 404 and "error" in json.loads(body)
    # A site whose name was pointed at 127.0.0.1 (DNS rebinding) reads nothing.
    assert get(url(console, "/api/topics"), headers={"Host": "evil.example"})[0] == 403
    status, _, body = get(url(console, "/topics/web/produce"), data=b"value=x")
    assert status == 403 and b"http-allow-writes" in body
    port = console.http_ports[0]
    for raw, code in (
        (b"NOT HTTP AT ALL\r\n\r\n", b" 400 "),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n", b" 431 "),
        (b"POST /api/topics/web/records HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", b" 413 "),
    ):  # fmt: skip
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(raw)
            assert code in s.recv(4096).split(b"\r\n")[0], raw[:30]
    assert get(url(console, "/api/cluster"))[0] == 200
    status, _, body = get(url(console, "/metrics"))
    assert status == 200 and b"quorumlog_role" in body


def test_a_secret_guards_the_console_and_writes_when_allowed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    c = ProcessCluster(str(tmp_path), size=1, http_ports=free_ports(1))
    c.env = {"QUORUMLOG_SECRET_FILE": str(secret)}
    c.http_allow_writes = True
    c.start_all()
    try:
        assert get(url(c, "/"))[0] == 401
        assert get(url(c, "/"), password="wrong")[0] == 401
        assert get(url(c, "/api/topics"), password="s3cret")[0] == 200
        assert get(url(c, "/metrics"))[0] == 200  # scrapers need no secret
        form = b"key=k&partition=0&value=%7B%22a%22%3A+1%7D"
        status, headers, _ = get(url(c, "/topics/default/produce"), "s3cret", form)
        assert status == 303 and "/topics/default/0/messages?offset=" in headers["location"]
        with Client(c.brokers, secret="s3cret", timeout=20) as client:
            [record] = client.read(0, topic="default")
        assert (record.key, record.value) == (b"k", b'{"a": 1}')
        status, _, body = get(
            url(c, "/api/topics/default/records"), "s3cret", b'{"value": "v", "key": "k"}'
        )
        assert status == 200 and json.loads(body)["offset"] > record.offset
        elsewhere = {"Origin": "http://evil.example"}
        assert get(url(c, "/topics/default/produce"), "s3cret", form, elsewhere)[0] == 403
    finally:
        c.stop_all()


def test_metrics_can_ask_for_the_secret_and_metrics_is_another_name(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    [port] = free_ports(1)
    c = ProcessCluster(str(tmp_path), size=1)
    c.env = {"QUORUMLOG_SECRET_FILE": str(secret)}
    c.start(1, extra=["--metrics", f"127.0.0.1:{port}", "--http-auth-metrics"])
    try:
        deadline = time.monotonic() + 30
        while (status := get(f"http://127.0.0.1:{port}/metrics")[0]) is None:
            assert time.monotonic() < deadline, "the listener opens"
            time.sleep(0.1)
        assert status == 401
        status, _, body = get(f"http://127.0.0.1:{port}/metrics", password="s3cret")
        assert status == 200 and b"quorumlog_term" in body
        assert get(f"http://127.0.0.1:{port}/", password="s3cret")[0] == 200
    finally:
        c.stop_all()
    base = ["serve", "--id", "1", "--data", str(tmp_path / "n"), "--listen", "127.0.0.1:1"]
    out = ql(*base, "--http-listen", "127.0.0.1:2", "--metrics", "127.0.0.1:3")
    assert out.returncode == 2 and b"another name" in out.stderr


def test_a_queue_groups_page_shows_leases_and_dead_letters(console):
    with Client(console.brokers, timeout=30) as client:
        client.create_topic("jobs", partitions=1)
        client.append([b"one", b"two", b"three"], topic="jobs")
    with Consumer(
        console.brokers, "crew", ["jobs"], mode="queue", lease_timeout=1.0, max_deliveries=1
    ) as member:
        leased = member.poll(2, 10.0)
        assert leased
        group = json.loads(get(url(console, "/api/groups/crew"))[2])
        assert group["mode"] == "queue" and group["partitions"][0]["leased"] == len(leased)
        # Unacked, the leases run out, and once delivered is all these may be: dead letters.
        deadline = time.monotonic() + 30
        while b"/topics/jobs.dlq" not in (page := get(url(console, "/groups/crew"))[2]):
            assert time.monotonic() < deadline, "the dead-letter topic is linked"
            member.poll(10, 0.5)
            time.sleep(0.5)
    assert b"Leased" in page
