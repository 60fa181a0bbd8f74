import pytest

from quorumlog.transport.addresses import format_address, is_loopback, parse_address


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("127.0.0.1:7001", ("127.0.0.1", 7001)),
        ("node-3.example:0", ("node-3.example", 0)),
        ("[::1]:7001", ("::1", 7001)),
    ],
)
def test_parse(text, parsed):
    assert parse_address(text) == parsed


@pytest.mark.parametrize("text", ["", "7001", "host:", ":7001", "host:70000", "host:x1", "host:-1"])
def test_parse_refuses(text):
    with pytest.raises(ValueError):
        parse_address(text)


def test_format_round_trips_through_parse():
    for sockaddr in [("10.0.0.1", 9), ("::1", 7001, 0, 0)]:
        assert parse_address(format_address(sockaddr)) == sockaddr[:2]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "localhost"])
def test_loopback(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.1", "db.internal"])
def test_not_loopback(host):
    assert not is_loopback(host)
