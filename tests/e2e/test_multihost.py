"""Several hosts: PostgreSQL, two server replicas and three agents, each agent in its own
network namespace with its own address on a bridge (``tests/e2e/netns.py``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.schemas.manifest import parse_manifest
from tests.e2e import netns
from tests.e2e.cluster import wait_for
from tests.e2e.replicas import ReplicatedCluster
from tests.imagebuild import busybox_is_static, busybox_rootfs, oci_archive, tar_of
from tests.postgres import PostgresServer

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))

# rank 0 listens on MASTER_ADDR:MASTER_PORT, rank 1 connects from its own host
MEET = """
import os, socket
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if os.environ["RANK"] == "0":
    with socket.create_server((addr, port)) as server:
        server.settimeout(60)
        peer, (peer_addr, _) = server.accept()
        with peer:
            print(f"rank 0 at {addr} met {peer.recv(64).decode()} from {peer_addr}", flush=True)
else:
    for _ in range(600):
        try:
            sock = socket.create_connection((addr, port), timeout=2)
            break
        except OSError:
            import time; time.sleep(0.1)
    with sock:
        sock.sendall(os.environ["CORRAL_NODE"].encode())
"""


class HostsCluster(ReplicatedCluster):
    """Replicas listening on the bridge; each agent inside one of ``hosts``."""

    def __init__(self, home: Path, db: str, hosts: netns.Hosts) -> None:
        super().__init__(home, db, replicas=2, host=hosts.gateway, node_timeout=10)
        self.hosts = hosts

    def start_agent_on(self, index: int, name: str, *extra: str) -> None:
        argv = [sys.executable, "-m", "corral", "agent", "--server", self.url, "--name", name]
        argv += ["--simulate", "8xH100", "--checkpoint-root", str(self.checkpoint_root)]
        argv += ["--labels", f"host={name}", "--image-cache", str(self.home / f"images-{name}")]
        argv += extra
        with open(self.home / "logs" / f"agent-{name}.log", "ab") as out:
            self.agents[name] = subprocess.Popen(
                self.hosts.command(index, argv),
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


PROLOG = "#!/bin/sh\necho checking GPUs\necho 'GPU 3 ECC errors' >&2\nexit 1\n"


@pytest.fixture
def hosts_cluster(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[HostsCluster]:
    """host-2's prolog always fails."""
    prolog = tmp_path / "prolog"
    prolog.write_text(PROLOG)
    prolog.chmod(0o755)
    with netns.Hosts(3) as hosts:
        cluster = HostsCluster(tmp_path / "home", postgres_server.new_database(), hosts)
        try:
            cluster.start_server()
            for i in range(3):
                extra = ("--prolog", str(prolog)) if i == 2 else ()
                cluster.start_agent_on(i, f"host-{i}", *extra)
            cluster.wait_nodes("host-0", "host-1", "host-2")
            yield cluster
        finally:
            cluster.stop()


def test_agents_on_three_hosts_publish_their_own_addresses_and_ranks_meet_over_tcp(
    hosts_cluster: HostsCluster,
) -> None:
    c = hosts_cluster.client()
    hosts = hosts_cluster.hosts
    addresses = {node.name: node.address for node in c.nodes()}
    assert addresses == {f"host-{i}": hosts.addresses[i] for i in range(3)}
    job = c.submit(parse_manifest({"nodes": 2, "command": [sys.executable, "-c", MEET]}))
    wait_for(lambda: c.get(job.id).state in ("succeeded", "failed"), 60, "the 2-node job")
    done = c.get(job.id)
    assert done.state == "succeeded", done.reason
    first, second = (t.node for t in sorted(done.tasks, key=lambda t: t.rank))
    out = c.logs(job.id, task=0)
    assert out == (f"rank 0 at {addresses[first]} met {second} from {addresses[second]}\n"), out


def test_a_prolog_failing_on_one_host_drains_it_and_requeues_the_job(
    hosts_cluster: HostsCluster,
) -> None:
    c = hosts_cluster.client()
    job = c.submit(parse_manifest({"node_selector": {"host": "host-2"}, "command": "true"}))

    def drained() -> bool:
        return next(n for n in c.nodes() if n.name == "host-2").state == "draining"

    wait_for(drained, 30, "host-2 to drain")
    node = next(n for n in c.nodes() if n.name == "host-2")
    assert node.reason == f"prolog failed (exit 1): GPU 3 ECC errors (job {job.id})"
    wait_for(lambda: c.get(job.id).attempt == 1, 10, "the requeue")
    again = c.get(job.id)
    assert again.state == "pending"  # only host-2 may take it, and it is drained


@pytest.mark.skipif(
    not busybox_is_static() or shutil.which("bwrap") is None,
    reason="needs bwrap (bubblewrap) and busybox-static",
)
def test_a_job_runs_in_an_image_with_a_read_only_dataset_on_another_host(
    hosts_cluster: HostsCluster, tmp_path: Path
) -> None:
    base = tmp_path / "site"
    base.mkdir()
    oci_archive(base / "busybox.tar", [tar_of(busybox_rootfs(base / "rootfs"))])
    dataset = base / "dataset"
    dataset.mkdir()
    (dataset / "input.txt").write_text("dataset line\n")
    script = (
        "cat /data/input.txt; "
        "if touch /data/new 2>/dev/null; then echo writable; else echo read-only; fi; "
        "echo on $CORRAL_NODE"
    )
    c = hosts_cluster.client()
    job = c.submit(
        parse_manifest(
            {
                "command": script,
                "image": f"oci-archive:{base}/busybox.tar",
                "mounts": [f"{dataset}:/data:ro"],
                "node_selector": {"host": "host-1"},
            }
        )
    )
    wait_for(lambda: c.get(job.id).state in ("succeeded", "failed"), 60, "the image job")
    assert c.get(job.id).state == "succeeded", c.get(job.id).reason
    assert c.logs(job.id) == "dataset line\nread-only\non host-1\n"
    assert not (dataset / "new").exists()
