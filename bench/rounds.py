"""Figures over rounds measured in alternation (docs/decisions/performance.md, "Comparisons measured in
alternation"): in every round each case runs on one system right after the other, so a
figure is the median round's rate, its percentiles are over the calls of every round, and
a ratio is the median of the rounds' paired ratios (the rounds' values kept beside, to show
the noise)."""

from __future__ import annotations

import statistics

from quorumlog.bench.workload import AppendRun, latency_fields


def round_fields(runs: list[AppendRun]) -> dict:
    """One figure's fields over its rounds: the median round's rate, percentiles over
    every call, and the CPU per record where a meter measured it."""
    rates = [run.records_s for run in runs]
    return {
        "records_s": statistics.median(rates),
        "records_s_rounds": rates,
        "mb_s": statistics.median([run.mb_s for run in runs]),
        **latency_fields([lat for run in runs for lat in run.latencies_s]),
        "errors": sum(run.errors for run in runs),
        **cpu_fields(runs),
    }


def cpu_fields(runs: list[AppendRun]) -> dict:
    """CPU per acknowledged record over the measured interval, medians of the rounds (each
    round's beside): the servers' processes together, and the client's process (rows
    measured with a meter only)."""
    if not any(run.server_cpu_s for run in runs):
        return {}
    fields = {}
    for who in ("server", "client"):
        rounds = [
            getattr(run, f"{who}_cpu_s") / run.records * 1e6 if run.records else 0.0 for run in runs
        ]
        fields[f"{who}_cpu_us_per_record"] = statistics.median(rounds)
        fields[f"{who}_cpu_us_per_record_rounds"] = rounds
    return fields


def paired_ratio(row: dict, base: dict, key: str, field: str = "records_s") -> None:
    """`row[key]`: the median of its rounds' ratios to `base`'s (`field`, records/s by
    default), each round against the one measured right beside it; the rounds' ratios
    go to `row[key + "_rounds"]`."""
    rounds = [
        mine / theirs if theirs else 0.0
        for mine, theirs in zip(row[f"{field}_rounds"], base[f"{field}_rounds"], strict=True)
    ]
    row[key] = statistics.median(rounds)
    row[f"{key}_rounds"] = rounds
