"""`quorumlog bench ... --plot`: PNG charts of the figures a run produced (matplotlib).

- scale: throughput against window and against record size;
- produce: latency percentiles (p50, p99) of each case;
- vs-nats: throughput against window, and latency percentiles, of quorumlog beside NATS;
- recovery: the restarted follower's dirty and flushed offsets over time, lazy against
  flush-per-chunk;
- failover: the gap of each kill beside the election timeout;
- soak: each node's resident memory and open files over time, with and without churn.
"""

from __future__ import annotations

import os

ELECTION_TIMEOUT_MAX_S = 0.6


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(
            "--plot needs matplotlib: install the dev extra (make test does)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(results: dict[str, list[dict]], prefix: str) -> list[str]:
    """Charts for the scenarios in `results`; returns the files written."""
    plt = _pyplot()
    written = []
    for name, draw in (
        ("scale", _scale),
        ("produce", _latency),
        ("vs-nats", _vs_nats),
        ("recovery", _recovery),
        ("failover", _failover),
        ("soak", _soak),
    ):
        rows = results.get(name)
        if not rows:
            continue
        figure = draw(plt, rows)
        if figure is None:
            continue
        path = f"{prefix}-{name}.png"
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written


def _scale(plt, rows: list[dict]):
    windows = [r for r in rows if r["figure"].startswith("window")]
    sizes = [r for r in rows if r["figure"].startswith("record")]
    if not windows and not sizes:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot([r["window"] for r in windows], [r["records_s"] for r in windows], marker="o")
    left.set(xlabel="appends in flight", ylabel="records/s", title="1 KiB records, acks=quorum")
    right.plot([r["record_bytes"] for r in sizes], [r["mb_s"] for r in sizes], marker="o")
    right.set(xscale="log", xlabel="record bytes", ylabel="MB/s", title="64 KiB appends, window 64")
    return figure


def _latency(plt, rows: list[dict]):
    # The matrix's 54 cases would be unreadable here: its table is in the JSON lines.
    cases = [r for r in rows if "p99_ms" in r and not r["figure"].startswith("matrix")]
    if not cases:
        return None
    figure, axis = plt.subplots(figsize=(11, 4.5))
    x = range(len(cases))
    axis.bar([i - 0.2 for i in x], [r["p50_ms"] for r in cases], width=0.4, label="p50")
    axis.bar([i + 0.2 for i in x], [r["p99_ms"] for r in cases], width=0.4, label="p99")
    axis.set_xticks(list(x), [r["figure"] for r in cases], rotation=35, ha="right", fontsize=8)
    axis.set(ylabel="ms", title="append latency")
    axis.legend()
    return figure


def _vs_nats(plt, rows: list[dict]):
    cases = [r for r in rows if "records_s" in r]
    if not cases:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    systems = list(dict.fromkeys(r["system"] for r in cases))
    for s, system in enumerate(systems):
        sweep = [r for r in cases if r["system"] == system and r["records_per_append"] == 1]
        left.plot(
            [r["window"] for r in sweep],
            [r["records_s"] for r in sweep],
            marker="o",
            color=f"C{s}",
            label=system,
        )
    left.set(
        xscale="log",
        xlabel="calls in flight (1 record of 1 KiB each)",
        ylabel="records/s",
        title="throughput against window",
    )
    left.legend()
    labels = list(
        dict.fromkeys(f"{r['records_per_append']} rec/call w{r['window']}" for r in cases)
    )
    width = 0.8 / (2 * len(systems))
    for s, system in enumerate(systems):
        mine = {
            f"{r['records_per_append']} rec/call w{r['window']}": r
            for r in cases
            if r["system"] == system
        }
        for k, (pct, hatch) in enumerate((("p50_ms", ""), ("p99_ms", "//"))):
            offset = (2 * s + k - len(systems) + 0.5) * width
            right.bar(
                [i + offset for i in range(len(labels))],
                [mine[label][pct] if label in mine else 0 for label in labels],
                width=width,
                color=f"C{s}",
                hatch=hatch,
                label=f"{system} {pct[:3]}",
            )
    right.set_xticks(range(len(labels)), labels, rotation=25, ha="right", fontsize=8)
    right.set(yscale="log", ylabel="ms per call", title="latency percentiles")
    right.legend(fontsize=7)
    return figure


def _recovery(plt, rows: list[dict]):
    series = [r for r in rows if r.get("timeline") and "curve" not in r["figure"]]
    if not series:
        return None
    figure, axis = plt.subplots(figsize=(9, 4.5))
    for row in series:
        t, dirty, flushed = zip(*row["timeline"], strict=True)
        axis.plot(t, dirty, label=f"{row['figure']}: dirty")
        axis.plot(t, flushed, linestyle="--", label=f"{row['figure']}: flushed")
    axis.set(xlabel="seconds since restart", ylabel="offset", title="follower catch-up")
    axis.legend(fontsize=8)
    return figure


def _failover(plt, rows: list[dict]):
    kills = [r for r in rows if r["figure"].startswith("kill")]
    if not kills:
        return None
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.bar([r["figure"] for r in kills], [r["gap_s"] for r in kills], label="gap")
    axis.axhline(ELECTION_TIMEOUT_MAX_S, color="red", linestyle="--", label="election timeout max")
    axis.set(ylabel="seconds", title="SIGKILL the leader -> first acknowledged append")
    axis.legend()
    return figure


def _soak(plt, rows: list[dict]):
    figure, axes = plt.subplots(2, len(rows), figsize=(6 * len(rows), 7), squeeze=False)
    for column, row in enumerate(rows):
        memory, files = axes[0][column], axes[1][column]
        for node_id, series in sorted(row["samples"].items()):
            minutes = [t / 60 for t, _, _ in series]
            memory.plot(minutes, [rss for _, rss, _ in series], label=f"node {node_id}")
            files.plot(minutes, [n for _, _, n in series], label=f"node {node_id}")
        memory.set_title(row["figure"])
        memory.set_ylabel("resident memory (MB)")
        files.set_ylabel("open files")
        files.set_xlabel("minutes")
        memory.legend()
    return figure
