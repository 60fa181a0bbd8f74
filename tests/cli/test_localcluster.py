"""Ports for test and bench clusters: free, distinct, and out of the way of outgoing
connections (which take their ports from the kernel's ephemeral range)."""

import random
import socket

from quorumlog.cli import localcluster
from quorumlog.cli.localcluster import _ephemeral_low, free_ports, port_band


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    ports = free_ports(20) + free_ports(20)
    assert len(set(ports)) == 40
    assert all(p < _ephemeral_low() for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch):
    first = random.Random(7).randrange(*port_band())
    monkeypatch.setattr(localcluster, "_pick", random.Random(7))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", first))
        busy.listen()
        assert free_ports(1) != [first]


def test_a_band_narrows_the_choice(monkeypatch):
    monkeypatch.setenv("QUORUMLOG_PORTS", "12000-12010")
    assert all(12000 <= p < 12010 for p in free_ports(5))
