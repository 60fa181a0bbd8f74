"""The console's pages, rendered on the node from the objects of console/data.py.

Every value from the cluster goes through `esc` (keys, values, headers, names): a record
whose value is `<script>` shows as that text. Sections marked `data-live` are re-read by
static/console.js every few seconds and swapped in, so the pages stay current without a
reload and without a second renderer in the browser.
"""

from __future__ import annotations

import re
from html import escape
from urllib.parse import quote, urlencode

LIVE_MS = 2000  # how often live sections are re-read
# A page of many partitions is re-read less often: at 1,000 a topic's page costs the nodes
# about 270 ms of CPU (bench console), which every 2 s would be 13% of a core.
LIVE_MS_PER_ROW = 20
LIVE_MS_MAX = 30_000


def live_ms(rows: int) -> int:
    return min(max(LIVE_MS, rows * LIVE_MS_PER_ROW), LIVE_MS_MAX)


VALUE_CHARS_SHOWN = 64 * 1024  # of one value on a page; /api/ gives it whole
_LINE_BREAKS = re.compile("[\n\t]")  # shown as they are; other unprintables as \xNN


def esc(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def topic_url(name: str) -> str:
    return f"/topics/{quote(name, safe='')}"


def messages_url(name: str, partition: int, **query: object) -> str:
    shown = {k: v for k, v in query.items() if v is not None and v != ""}
    tail = f"?{urlencode(shown)}" if shown else ""
    return f"{topic_url(name)}/{partition}/messages{tail}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _table(headers: list[str], rows: list[str], empty: str, cls: str = "") -> str:
    if not rows:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return (
        f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _cells(*cells: str) -> str:
    """Cells already rendered (escaped or built from escaped parts)."""
    return "".join(f"<td>{c}</td>" for c in cells)


def layout(title: str, node_id: int, body: str, section: str, every_ms: int = LIVE_MS) -> str:
    nav = "".join(
        f'<a href="{href}"{" class=current" if name == section else ""}>{name}</a>'
        for name, href in (("Cluster", "/"), ("Topics", "/topics"), ("Groups", "/groups"))
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)} · quorumlog</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/console.js" defer></script>
</head><body>
<header><a class="brand" href="/">quorumlog</a><nav>{nav}</nav>
<span class="served">node {esc(node_id)} <span id="updated" class="muted"></span></span></header>
<main data-live-ms="{every_ms}">
<h1>{esc(title)}</h1>
{body}
</main></body></html>
"""


def error_page(node_id: int, status: int, message: str) -> str:
    titles = {400: "Bad request", 403: "Not allowed", 404: "Not found"}
    title = titles.get(status, "The cluster did not answer")
    return layout(title, node_id, f'<p class="error">{esc(message)}</p>', "")


# --------------------------------------------------------------------------- cluster


def cluster_page(node_id: int, cluster: dict) -> str:
    members = cluster["members"]
    # Removed nodes that still run are listed, not counted.
    counted = [m for m in members if m.get("role") != "removed"]
    up = sum("error" not in m for m in counted)
    cards = [
        ("Members up", f"{up} / {len(counted)}", up < len(counted)),
        ("Controller leader", _node(cluster["controller_id"]), cluster["controller_id"] is None),
        ("Topics", cluster["topics"], False),
        ("Partitions", cluster["partitions"], False),
        ("Without a leader", cluster["partitions_without_leader"], True),
        ("Under-replicated", cluster["partitions_under_replicated"], True),
    ]
    summary = "".join(
        f'<div class="card{" bad" if alarm and value not in (0, "0") else ""}" '
        f'data-card="{esc(label)}"><div class="label">{esc(label)}</div>'
        f'<div class="value">{esc(value)}</div></div>'
        for label, value, alarm in cards
    )
    rows = [_member_row(m) for m in members]
    headers = ["Node", "Address", "State", "Role", "Term", "Leads", "Hosts", "Disk used", "Fsync"]
    table = _table(headers, rows, "No member answered.", "members")
    body = f'<section data-live><div class="cards">{summary}</div>{table}</section>'
    return layout("Cluster", node_id, body, "Cluster")


def _node(node_id: int | None) -> str:
    return "none" if node_id is None else f"node {node_id}"


def _member_row(m: dict) -> str:
    node = m["node_id"]
    if "error" in m:
        return (
            f'<tr data-node="{esc(node)}" data-state="down">'
            + _cells(esc(node), esc(m.get("address")), '<span class="badge down">down</span>')
            + f'<td colspan="6" class="muted">{esc(m["error"])}</td></tr>'
        )
    disk = m.get("disks", {}).get(str(node), {})
    fsync = f"{disk['fsync_ms']:.1f} ms" if disk else "-"
    if disk.get("slow_disk"):
        fsync += ' <span class="badge warn">slow</span>'
    return (
        f'<tr data-node="{esc(node)}" data-state="up">'
        + _cells(
            esc(node),
            esc(m.get("address")),
            '<span class="badge up">up</span>',
            esc(m["role"]),
            esc(m["term"]),
            esc(m["partitions_led"]),
            esc(m["partitions_hosted"]),
            esc(_bytes(m.get("disk_bytes"))),
            fsync,
        )
        + "</tr>"
    )


# --------------------------------------------------------------------------- topics


def topics_page(node_id: int, topics: list[dict]) -> str:
    rows = [
        "<tr>"
        + _cells(_link(topic_url(t["topic"]), t["topic"]), esc(t["partitions"]), esc(t["replicas"]))
        + "</tr>"
        for t in topics
    ]
    table = _table(["Topic", "Partitions", "Replicas"], rows, "No topics.", "topics")
    return layout("Topics", node_id, f"<section data-live>{table}</section>", "Topics")


def topic_page(node_id: int, name: str, partitions: list[dict], allow_writes: bool) -> str:
    rows = [_partition_row(name, p) for p in partitions]
    headers = ["Partition", "Leader", "Term", "Replicas", "Log start", "End", "Bytes"]
    table = _table(headers, rows, "No partitions.", "partitions")
    config = partitions[0]["config"] if partitions else {}
    settings = _table(
        ["Setting", "Value"],
        [f"<tr>{_cells(esc(k), esc(v))}</tr>" for k, v in sorted(config.items())],
        "No settings.",
        "config",
    )
    form = _produce_form(name, len(partitions)) if allow_writes else ""
    body = f"<section data-live>{table}</section><h2>Configuration</h2>{settings}{form}"
    return layout(f"Topic {name}", node_id, body, "Topics", live_ms(len(partitions)))


def _partition_row(name: str, p: dict) -> str:
    leader = p["leader_id"]
    replicas = "".join(_replica_badge(r, leader) for r in p.get("replica_status", ()))
    return (
        f'<tr data-partition="{esc(p["partition"])}">'
        + _cells(
            _link(messages_url(name, p["partition"]), p["partition"]),
            '<span class="badge down">none</span>' if leader is None else esc(leader),
            esc(p["term"]),
            f'<div class="replicas">{replicas}</div>',
            esc(p["log_start_offset"]),
            esc(p["commit_offset"]),
            esc(_bytes(p.get("size_bytes"))),
        )
        + "</tr>"
    )


def _replica_badge(r: dict, leader: int | None) -> str:
    node = r["node_id"]
    if "error" in r:
        return f'<span class="replica down" data-replica="{esc(node)}">{esc(node)}: down</span>'
    cls = "leader" if node == leader else ("lagging" if r["lag"] else "in-sync")
    detail = f"lag {r['lag']} · flushed {r['flushed_offset']} · dirty {r['dirty_offset']}"
    return (
        f'<span class="replica {cls}" data-replica="{esc(node)}" title="{esc(r["role"])}">'
        f"{esc(node)}: {esc(detail)}</span>"
    )


def _produce_form(name: str, partitions: int) -> str:
    return f"""<h2>Produce a record</h2>
<form class="produce" method="post" action="{esc(topic_url(name))}/produce">
<label>Key <input name="key" autocomplete="off"></label>
<label>Partition <input name="partition" type="number" min="0" max="{partitions - 1}"
 placeholder="by key" class="partition"></label>
<label class="wide">Value <textarea name="value" rows="4" required></textarea></label>
<button type="submit">Produce</button></form>"""


# --------------------------------------------------------------------------- messages


def messages_page(node_id: int, page: dict) -> str:
    name, partition, limit = page["topic"], page["partition"], page["limit"]
    records = page["records"]
    rows = [_record_row(r) for r in records]
    table = _table(
        ["Offset", "Timestamp", "Key", "Headers", "Value"],
        rows,
        "No records here." if page["key"] is None else "No record of this key here.",
        "records",
    )
    start, end = page["log_start_offset"], page["commit_offset"]
    shown_from = records[0]["offset"] if records else page["from_offset"]
    nav = [
        _link(messages_url(name, partition, before=shown_from), "← Older")
        if page["from_offset"] > start
        else "",
        _link(messages_url(name, partition, last=limit), "Latest"),
        _link(
            messages_url(name, partition, offset=page["next_offset"], key=page["key"]),
            "Search on →" if page["key"] is not None else "Newer →",
        )
        if page["next_offset"] <= end
        else "",
    ]
    search = f"""<form class="query" method="get">
<label>Offset <input name="offset" type="number" min="0"></label>
<label>Time <input name="time" placeholder="2026-11-28T09:00:00Z or -10m"></label>
<label>Last <input name="last" type="number" min="1" placeholder="{limit}"></label>
<label>Key <input name="key" value="{esc(page["key"])}" autocomplete="off"></label>
<button type="submit">Show</button></form>"""
    scanned = _searched(page) if page["key"] is not None else ""
    about = (
        f'<p class="muted">Partition {esc(partition)} of {_link(topic_url(name), name)}: '
        f"offsets {esc(start)} to {esc(end)}.</p>"
    )
    links = f'<p class="paging">{" ".join(x for x in nav if x)}</p>'
    body = f"{about}{search}{scanned}{table}{links}"
    return layout(f"{name} / {partition}", node_id, body, "Topics")


def _searched(page: dict) -> str:
    """Which partition a key search read, and where the key's records go."""
    name, partition, key = page["topic"], page["partition"], page["key"]
    hashed = page.get("key_partition")
    text = f"Searched {esc(page['scanned'])} records of partition {esc(partition)} for key "
    text += f"<code>{_shown(key, 'utf-8')}</code>"
    if hashed == partition:
        text += ", the partition this key hashes to (where clients put its records)."
    elif hashed is not None:
        elsewhere = _link(messages_url(name, hashed, key=key), f"partition {hashed}")
        text += f": this key hashes to {elsewhere} (where clients put its records)."
    return f'<p class="muted search">{text}</p>'


def _record_row(r: dict) -> str:
    headers = "".join(
        f'<div class="header">{esc(h["name"])}: {_shown(h["value"], h["value_encoding"])}</div>'
        for h in r["headers"]
    )
    value = r.get("value_pretty") or r["value"]
    more = ""
    if value is not None and len(value) > VALUE_CHARS_SHOWN:  # hex: an even cut, whole bytes
        more = esc(f"… ({len(value) - VALUE_CHARS_SHOWN} more: see /api/)")
        value = value[:VALUE_CHARS_SHOWN]
    return (
        f'<tr data-offset="{esc(r["offset"])}">'
        + _cells(
            esc(r["offset"]),
            f'<span title="{esc(r["timestamp_ms"])}">{esc(r["timestamp"])}</span>',
            _shown(r["key"], r["key_encoding"]),
            headers,
            f'<pre class="value">{_shown(value, r["value_encoding"])}{more}</pre>',
        )
        + "</tr>"
    )


def _shown(text: str | None, encoding: str | None) -> str:
    """Bytes as text where they print; every other byte as `\\xNN`, set apart from the
    text (so a control character is not an empty box, and a value whose text is a
    backslash and an x is told from one). Bytes that are not UTF-8 (`encoding` "hex": the
    JSON's hex string) show the same way, their UTF-8 stretches as text."""
    if text is None:
        return '<span class="muted">null</span>'
    if encoding == "hex":
        decoded = bytes.fromhex(text).decode("utf-8", "surrogateescape")
        return f'<span class="hex" title="not UTF-8">{_escaped(decoded)}</span>'
    return _escaped(text)


def _escaped(text: str) -> str:
    if all(line.isprintable() for line in _LINE_BREAKS.split(text)):
        return esc(text)  # the common case, without a step per character
    out: list[str] = []
    plain = 0  # start of the run of printable characters not yet written
    for i, ch in enumerate(text):
        if ch.isprintable() or ch in "\n\t":
            continue
        out.append(esc(text[plain:i]))
        if "\udc80" <= ch <= "\udcff":  # a byte that is not UTF-8 (surrogateescape)
            data, title = bytes([ord(ch) - 0xDC00]), "not UTF-8"
        else:
            data, title = ch.encode("utf-8", "surrogatepass"), f"U+{ord(ch):04X}"
        shown = "".join(f"\\x{b:02x}" for b in data)
        out.append(f'<span class="byte" title="{title}">{shown}</span>')
        plain = i + 1
    out.append(esc(text[plain:]))
    return "".join(out)


# --------------------------------------------------------------------------- groups


def groups_page(node_id: int, groups: list[dict]) -> str:
    rows = [
        "<tr>"
        + _cells(
            _link(f"/groups/{quote(g['group'], safe='')}", g["group"]),
            esc(g["mode"]),
            esc(g["members"]),
        )
        + "</tr>"
        for g in groups
    ]
    table = _table(["Group", "Mode", "Members"], rows, "No consumer groups.", "groups")
    return layout("Consumer groups", node_id, f"<section data-live>{table}</section>", "Groups")


def group_page(node_id: int, group: dict, dead_letters: list[str]) -> str:
    queue = group["mode"] == "queue"
    members = _table(
        ["Member", "Session timeout", "Partitions"],
        [
            "<tr>"
            + _cells(
                esc(m["member"]),
                esc(f"{m['session_timeout_ms']} ms"),
                esc(", ".join(f"{t}/{p}" for t, p in m["partitions"]) or "-"),
            )
            + "</tr>"
            for m in group["members"]
        ],
        "No active members.",
        "members",
    )
    last = "Leased" if queue else "Owner"
    rows = [
        f'<tr data-topic="{esc(r["topic"])}" data-partition="{esc(r["partition"])}">'
        + _cells(
            _link(topic_url(r["topic"]), r["topic"]),
            esc(r["partition"]),
            esc("-" if r["committed"] is None else r["committed"]),
            esc(r["end"]),
            f'<span class="lag">{esc("-" if r["lag"] is None else r["lag"])}</span>',
            esc(r.get("leased", 0) if queue else (r["owner"] or "-")),
        )
        + "</tr>"
        for r in group["partitions"]
    ]
    partitions = _table(
        ["Topic", "Partition", "Committed", "End", "Lag", last], rows, "No partitions.", "lag"
    )
    if group["partitions"]:
        partitions += (
            '<p class="muted">End: the offset of the last record (as on the topic page). '
            "Committed: the next offset the group reads (Kafka's position), so a group that "
            "read everything shows End + 1 and lag 0.</p>"
        )
    summary = (
        f'<div class="cards"><div class="card"><div class="label">Mode</div>'
        f'<div class="value">{esc(group["mode"])}</div></div>'
        f'<div class="card" data-card="Total lag"><div class="label">Total lag</div>'
        f'<div class="value" id="total-lag">{esc(group["lag"])}</div></div>'
        f'<div class="card"><div class="label">Generation</div>'
        f'<div class="value">{esc(group["generation"])}</div></div></div>'
    )
    dlq = (
        "<h2>Dead letters</h2><p>" + " ".join(_link(topic_url(t), t) for t in dead_letters) + "</p>"
        if dead_letters
        else ""
    )
    body = (
        f"<section data-live>{summary}<h2>Members</h2>{members}"
        f"<h2>Positions</h2>{partitions}{dlq}</section>"
    )
    every_ms = live_ms(len(group["partitions"]))
    return layout(f"Group {group['group']}", node_id, body, "Groups", every_ms)
