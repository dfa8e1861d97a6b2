"""Hosts for end-to-end tests: network namespaces on a bridge, each with its own address.

``Hosts(n)`` makes a Linux bridge with address ``10.<a>.<b>.1/24`` in the test's own
namespace (where the servers and PostgreSQL run) and ``n`` namespaces, each joined to it by
a veth pair whose inside end is called ``eth0`` with address ``10.<a>.<b>.<11+i>`` and a
default route through the bridge. Processes started with :meth:`Hosts.command` run inside
one of them: they reach the servers at the bridge's address and each other at their own.

Everything is named with a prefix unique to this test process, and :meth:`Hosts.close`
(also on failure, as a context manager) deletes every namespace and the bridge; leftovers
of a killed earlier run with the same prefix are removed first. Needs root and ``ip``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from types import TracebackType

PREFIX = "crl"


def available() -> str | None:
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class Hosts:
    def __init__(self, count: int) -> None:
        tag = os.getpid() % 10_000
        self.prefix = f"{PREFIX}{tag}"
        self.subnet = f"10.{200 + tag % 50}.{tag % 250}"
        self.bridge = f"{self.prefix}br"
        self.gateway = f"{self.subnet}.1"
        self.names = [f"{self.prefix}h{i}" for i in range(count)]
        self.addresses = [f"{self.subnet}.{11 + i}" for i in range(count)]

    def __enter__(self) -> Hosts:
        self.close()  # what a killed earlier run of this pid left
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for name, address in zip(self.names, self.addresses, strict=True):
                self._host(name, address)
        except BaseException:
            self.close()
            raise
        return self

    def _host(self, name: str, address: str) -> None:
        outside = f"{name}v"
        _ip("netns", "add", name)
        _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "route", "add", "default", "via", self.gateway)

    def command(self, index: int, argv: list[str]) -> list[str]:
        """``argv`` run inside host ``index``."""
        return ["ip", "netns", "exec", self.names[index], *argv]

    def close(self) -> None:
        """Kill what still runs inside the hosts, delete them and the bridge."""
        for name in self.names:
            found = _ip("netns", "pids", name, check=False)
            for pid in found.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            _ip("netns", "del", name, check=False)
        _ip("link", "del", self.bridge, check=False)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
