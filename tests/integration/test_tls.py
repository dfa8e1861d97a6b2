"""HTTPS: the server with a certificate and key; the SDK, the CLI, a real agent and a
task's checkpoint report verifying it with a CA certificate made for the test."""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from corral.client import Client
from corral.errors import ConnectionFailedError
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server, start_server


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost (its own CA) and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corral-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    cert, key = self_signed(tmp_path)
    server, uvicorn_server, thread = start_server(
        tmp_path / "home", tls_cert=cert, tls_key=key, sync_interval=0.3
    )
    try:
        yield server, cert
    finally:
        server.ctx.watch.close()  # answer the agent's open long-poll at once
        uvicorn_server.should_exit = True
        thread.join(timeout=10)


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    return {**env, "CORRAL_HOME": str(home), "PYTHONUNBUFFERED": "1", **extra}


REPORT = (
    "from corral.train.checkpoint import notify_checkpoint; assert notify_checkpoint(3, 'ckpt')"
)


def test_https_with_a_ca_certificate(tls_server: tuple[Server, Path], tmp_path: Path) -> None:
    server, ca = tls_server
    assert server.url.startswith("https://")
    with pytest.raises(ConnectionFailedError):  # not trusted by the system CAs
        Client(server.url, server.admin_token).whoami()
    with Client(server.url, server.admin_token, ca_cert=ca) as client:
        assert client.whoami().role == "admin"

    home = tmp_path / "cli"
    login = subprocess.run(
        [sys.executable, "-m", "corral", "login", "--server", server.url, "--token",
         server.admin_token, "--ca-cert", str(ca)],
        env=_env(home), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert login.returncode == 0, login.stderr
    jobs = subprocess.run(
        [sys.executable, "-m", "corral", "jobs", "-o", "json"],
        env=_env(home), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert jobs.returncode == 0, jobs.stderr  # server, token and CA all from the home

    agent_home = tmp_path / "agent"
    log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen(
        [sys.executable, "-m", "corral", "agent", "--server", server.url, "--name", "tls-node",
         "--simulate", "1xH100", "--ca-cert", str(ca), "--join-token", server.join_token],
        env=_env(agent_home), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    client = Client(server.url, server.admin_token, ca_cert=ca)
    try:
        wait_for(lambda: [n.name for n in client.nodes()] == ["tls-node"], 30, "the agent")
        job = client.submit({"command": [sys.executable, "-c", REPORT]})
        done = client.wait(job.id, timeout=60, poll=0.2)[0]
        assert done.state == "succeeded", client.logs(job.id)
        assert done.last_checkpoint_at is not None
    finally:
        client.close()  # (an open TLS keep-alive connection holds up the server's shutdown)
        agent.terminate()
        agent.wait(timeout=20)
        log.close()


def test_server_refuses_half_a_tls_configuration(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    answer = subprocess.run(
        [sys.executable, "-m", "corral", "server", "--tls-cert", str(cert)],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert answer.returncode == 1 and "--tls-cert and --tls-key go together" in answer.stderr
