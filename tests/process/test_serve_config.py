"""`serve` settings: flags over environment over the TOML file; metrics; bad settings."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request

from quorumlog import Client, Consumer
from quorumlog.cli.localcluster import QUORUMLOG, free_ports


def test_flags_override_environment_override_file(tmp_path):
    node_port, env_port, metrics_port = free_ports(3)
    config = tmp_path / "node.toml"
    config.write_text(
        f"""
[node]
id = 1
data = "{tmp_path / "data"}"
listen = "127.0.0.1:{node_port}"
peers = "1=127.0.0.1:{node_port}"
metrics = "127.0.0.1:{metrics_port}"
[raft]
election_timeout_min_s = 0.2
election_timeout_max_s = 0.4
"""
    )
    env = {**os.environ, "QUORUMLOG_LISTEN": f"127.0.0.1:{env_port}"}
    # The environment moves the listener; the flag moves the (single) voter with it.
    args = [*QUORUMLOG, "serve", "--config", str(config), "--peers", f"1=127.0.0.1:{env_port}"]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        with Client(f"127.0.0.1:{env_port}", timeout=20) as c:
            assert c.append([b"configured"]) >= 0
        deadline = time.monotonic() + 10
        while True:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read()
                if b'quorumlog_appends_total{acks="quorum"} 1.0' in text:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "metrics are served"
            time.sleep(0.2)
        assert b'quorumlog_role{role="leader"} 1.0' in text
        assert b"quorumlog_fsync_latency_seconds_bucket" in text
        assert b'quorumlog_append_latency_seconds_count{acks="quorum"}' in text
        with Consumer(f"127.0.0.1:{env_port}", "metered", ["default"]) as consumer:
            assert consumer.poll(10, 10.0)
            consumer.commit()
        lag = b'quorumlog_group_lag_records{group="metered",partition="0",topic="default"}'
        deadline = time.monotonic() + 20
        while lag not in urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read():
            assert time.monotonic() < deadline, "the group's lag is a metric"
            time.sleep(0.2)
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0, log.read_text()[-4000:]


def test_unknown_settings_are_usage_errors(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[raft]\nheartbeat_ms = 3\n")
    result = subprocess.run(
        [
            *QUORUMLOG,
            "serve",
            "--config",
            str(config),
            "--id",
            "1",
            "--data",
            str(tmp_path),
            "--listen",
            "127.0.0.1:1",
        ],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert b"heartbeat_ms" in result.stderr
