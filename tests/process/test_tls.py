"""Real processes over TLS with mutual authentication: nodes and clients show certificates
one CA signed; a client without that CA, or without a certificate, is refused in one line
and the nodes serve everyone else."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import trio

from quorumlog import AsyncClient, Client
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster, free_ports
from tests.process.test_membership import ql

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

LEAF_EXTENSIONS = """\
basicConstraints = CA:FALSE
keyUsage = digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1
"""


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return cert, key


def make_leaf(folder: Path, name: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    cert, key, request = folder / f"{name}.pem", folder / f"{name}.key", folder / f"{name}.csr"
    extensions = folder / "leaf.ext"
    extensions.write_text(LEAF_EXTENSIONS)
    openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(request), "-subj", f"/CN={name}",
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(extensions),
    )  # fmt: skip
    return cert, key


def test_a_cluster_over_mutual_tls_refuses_clients_the_ca_did_not_sign(tmp_path):
    ca = make_ca(tmp_path, "ca")
    node_cert, node_key = make_leaf(tmp_path, "node", ca)
    client_cert, client_key = make_leaf(tmp_path, "client", ca)
    stranger_ca = make_ca(tmp_path, "stranger-ca")
    stranger_cert, stranger_key = make_leaf(tmp_path, "stranger", stranger_ca)
    tls = {"tls_ca": str(ca[0]), "tls_cert": str(client_cert), "tls_key": str(client_key)}
    flags = ["--tls-ca", str(ca[0]), "--tls-cert", str(client_cert), "--tls-key", str(client_key)]

    (tmp_path / "cluster").mkdir()
    cluster = ProcessCluster(str(tmp_path / "cluster"), size=3)
    node_flags = ["--tls-cert", str(node_cert), "--tls-key", str(node_key), "--tls-ca", str(ca[0])]
    [http_port] = free_ports(1)
    for node_id in cluster.ids:
        console = ["--http-listen", f"127.0.0.1:{http_port}"] if node_id == 1 else []
        cluster.start(node_id, extra=node_flags + console)
    cluster.wait_listening()
    try:
        with Client(cluster.brokers, timeout=30, **tls) as c:
            first = c.append([b"over tls"])  # the peers elected a leader over TLS too
        # The HTTP listener speaks HTTPS with the node's certificate, asking the browser
        # for none. Without a cluster secret its console stays shut: it reads the cluster
        # with the node's certificate, and would open it to anyone. Metrics are served.
        https = ssl.create_default_context(cafile=str(ca[0]))
        metrics = f"https://127.0.0.1:{http_port}/metrics"
        with urllib.request.urlopen(metrics, context=https, timeout=20) as answer:
            assert b"quorumlog_role" in answer.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"https://127.0.0.1:{http_port}/", context=https, timeout=20)
        assert refused.value.code == 403 and b"secret" in refused.value.read()
        out = subprocess.run(
            [*QUORUMLOG, "produce", "-b", cluster.brokers, *flags],
            input=b"from the command line\n",
            capture_output=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        out = ql("consume", "-b", cluster.brokers, *flags, "--from", "earliest")
        assert out.stdout.splitlines() == [b"over tls", b"from the command line"]

        refused = {  # who: (flags, what the one line says)
            "a client that trusts another CA": (
                [
                    "--tls-ca", str(stranger_ca[0]),
                    "--tls-cert", str(stranger_cert), "--tls-key", str(stranger_key),
                ],
                "TLS refused: certificate verify failed",
            ),
            "a client without a certificate": (["--tls-ca", str(ca[0])], "--tls-cert"),
            "a client without TLS": ([], "gave up"),  # the node closes, or never answers
        }  # fmt: skip
        for who, (args, says) in refused.items():
            out = ql("status", "-b", cluster.address(1), *args, "--timeout", "3")
            lines = out.stderr.decode().strip().splitlines()
            assert out.returncode == 1 and len(lines) == 1, (who, lines)
            assert says in lines[0] and "Traceback" not in lines[0], (who, lines)

        async def async_read() -> list[bytes]:
            async with AsyncClient(cluster.brokers, timeout=30, **tls) as c:
                return [r.value for r in await c.read(first)]

        assert trio.run(async_read) == [b"over tls", b"from the command line"]
    finally:
        cluster.stop_all()


def test_serve_refuses_tls_files_it_cannot_use_in_one_line(tmp_path):
    base = ["serve", "--id", "1", "--data", str(tmp_path / "n1"), "--listen", "127.0.0.1:1"]
    base += ["--peers", "1=127.0.0.1:1"]
    for flags, says in (
        (["--tls-cert", "c.pem"], "go together"),
        (["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"], "cannot load"),
    ):
        out = ql(*base, *flags)
        lines = out.stderr.decode().strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and says in lines[0], lines


def test_the_console_over_https_reads_the_cluster_with_the_nodes_certificate(tmp_path):
    ca = make_ca(tmp_path, "ca")
    node_cert, node_key = make_leaf(tmp_path, "node", ca)
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    (tmp_path / "cluster").mkdir()
    cluster = ProcessCluster(str(tmp_path / "cluster"), size=1, http_ports=free_ports(1))
    cluster.env = {"QUORUMLOG_SECRET_FILE": str(secret)}
    flags = ["--tls-cert", str(node_cert), "--tls-key", str(node_key), "--tls-ca", str(ca[0])]
    cluster.start(1, extra=flags)
    cluster.wait_listening()
    try:
        request = urllib.request.Request(f"https://127.0.0.1:{cluster.http_ports[0]}/api/cluster")
        request.add_header("Authorization", "Basic " + base64.b64encode(b"ops:s3cret").decode())
        https = ssl.create_default_context(cafile=str(ca[0]))
        with urllib.request.urlopen(request, context=https, timeout=20) as answer:
            members = json.loads(answer.read())["members"]
        assert [(m["node_id"], "error" in m) for m in members] == [(1, False)]
    finally:
        cluster.stop_all()
