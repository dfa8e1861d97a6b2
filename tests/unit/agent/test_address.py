"""The address an agent publishes by default (``corral agent --address``): the source
address this host uses to reach the server, trying the replicas in order."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from corral.agent.host import local_address


def own_addresses() -> list[str]:
    """This host's non-loopback IPv4 addresses (``ip -4 -o addr``)."""
    if shutil.which("ip") is None:
        return []
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    found = [line.split()[3].split("/")[0] for line in out.splitlines() if " inet " in line]
    return [a for a in found if not a.startswith("127.")]


@pytest.mark.parametrize(
    "servers",
    [
        "http://127.0.0.1:7733",
        "https://localhost:7733",
        "http://[::1]:7733",
        ["http://127.0.0.1:7733", "http://127.0.0.1:7734"],
        "127.0.0.1:7733",  # no scheme
    ],
)
def test_a_server_on_loopback_means_a_one_host_cluster(servers: str | list[str]) -> None:
    assert local_address(servers) == "127.0.0.1"


def test_the_source_address_towards_the_server() -> None:
    addresses = own_addresses()
    if not addresses:
        pytest.skip("no non-loopback IPv4 address on this host")
    for address in addresses:  # the route to one's own address leaves from that address
        assert local_address(f"https://{address}:7733") == address


def test_a_replica_whose_name_does_not_resolve_is_skipped() -> None:
    addresses = own_addresses()
    if not addresses:
        pytest.skip("no non-loopback IPv4 address on this host")
    servers = ["https://no-such-host.invalid:7733", f"https://{addresses[-1]}:7733"]
    assert local_address(servers) == addresses[-1]
