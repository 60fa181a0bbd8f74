"""Times on the command line (`consume --from-time`, `group reset-offsets --to-time`): an
ISO 8601 instant with its zone, or a span back from now (quorumlog/client/times.py)."""

from __future__ import annotations

import click

from quorumlog.client.times import parse_time_ms


class TimeParam(click.ParamType):
    """A click option's time, as milliseconds since the epoch (bad: one line, exit 2)."""

    name = "TIME"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time_ms(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


TIME = TimeParam()
