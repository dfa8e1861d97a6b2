"""Starting tasks in container images: a cached image versus no image, and the first start
of an image of a few hundred MB (its unpack into the node's cache).

Two views. *Agent*: the agent's own supervisor starts ``true`` and reaps it (the image
prepared, bwrap set up, the program run), without a server. *Cluster*: a real
``corral server`` and ``corral agent`` (processes); submit to the task running, as
``start_latency.py`` measures it. The big image is busybox plus one gzip layer of random
files (incompressible, the worst case for the unpacker); each first start uses a fresh copy
(other random bytes, another digest).

    python bench/image_start.py [--runs 10] [--size-mb 300] [--first-starts 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.cluster import LocalCluster, wait_for  # noqa: E402
from tests.imagebuild import D, busybox_rootfs, oci_archive, tar_entries, tar_of  # noqa: E402
from tests.imagebuild import entry as tar_entry  # noqa: E402

from corral.agent.container import ContainerRequest, ContainerRuntime  # noqa: E402
from corral.agent.images import ImageCache  # noqa: E402
from corral.agent.staging import Staging  # noqa: E402
from corral.agent.supervisor import ProcessSupervisor, TaskLaunch, TaskState  # noqa: E402

FILE_SIZES = (4 << 10, 64 << 10, 1 << 20, 8 << 20)  # a mix, as in real images


def big_layer(megabytes: int) -> bytes:
    """A layer of random files adding up to ``megabytes`` MB, in a few directories."""
    entries, total, index = [], 0, 0
    while total < megabytes * 10**6:
        size = FILE_SIZES[index % len(FILE_SIZES)]
        entries.append(tar_entry(f"opt/big/d{index % 16}/f{index}", data=os.urandom(size)))
        total += size
        index += 1
    dirs = [tar_entry("opt", D), tar_entry("opt/big", D)]
    dirs += [tar_entry(f"opt/big/d{i}", D) for i in range(16)]
    return tar_entries(dirs + entries)


def agent_starts(top: Path, image: str | None, runs: int) -> list[float]:
    """Seconds from ``start()`` to the reaped exit of ``true``, ``runs`` times."""
    supervisor = ProcessSupervisor()
    runtime = ContainerRuntime(ImageCache(top / "agent-cache"), "bench", 0)
    staging = Staging(supervisor, runtime)
    times = []
    for run in range(runs):
        key = f"{image or 'none'}-{run}"
        launch = TaskLaunch(key, ["true"], {"PATH": "/usr/bin:/bin"}, None, top / "log", 5.0)
        request = ContainerRequest(image=image, checkpoint_dir=str(top)) if image else None
        began = time.perf_counter()
        staging.start(launch, request)
        while (status := staging.status(key)) is None or status.state is not TaskState.EXITED:
            staging.poll()
            time.sleep(0.001)
        times.append(time.perf_counter() - began)
        assert status.exit_code == 0, (status, (top / "log").read_text()[-500:])
        staging.forget(key)
    return times


def cluster_starts(cluster: LocalCluster, manifest: dict, runs: int) -> list[float]:
    """Seconds from submitting to the task reported running, ``runs`` times."""
    client = cluster.client()
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        job = client.submit({"command": ["sleep", "300"], "grace_period": "1s", **manifest})

        def running(job_id: int = job.id) -> bool:
            found = client.get(job_id)
            if found.state == "failed":
                raise AssertionError(f"job {job_id} failed: {found.reason}")
            return bool(found.tasks) and found.tasks[0].state == "running"

        wait_for(running, 600, "the job to run")
        times.append(time.perf_counter() - began)
        client.cancel(job.id)
        wait_for(lambda j=job.id: client.get(j).tasks[0].state == "exited", 60, "exit")
    return times


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:,.0f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--first-starts", type=int, default=2)
    args = parser.parse_args()
    console = Console(width=120)
    with tempfile.TemporaryDirectory(prefix="crl-bench-", dir="/tmp") as name:
        top = Path(name)
        os.chmod(top, 0o755)
        base = tar_of(busybox_rootfs(top / "rootfs"))
        oci_archive(top / "small.tar", [base])
        small = f"oci-archive:{top}/small.tar"
        began = time.perf_counter()
        bigs = []
        for copy in range(args.first_starts + 1):
            path = top / f"big{copy}.tar"
            oci_archive(path, [base, big_layer(args.size_mb)])
            bigs.append(f"oci-archive:{path}")
        size = (top / "big0.tar").stat().st_size
        took = time.perf_counter() - began
        console.print(f"built {len(bigs)} images of {size / 1e6:,.0f} MB in {took:.0f}s")
        rows: list[tuple[str, list[float], list[float]]] = []
        rows.append(("no image", agent_starts(top, None, args.runs), []))
        agent_starts(top, small, 1)  # unpack
        rows.append(("cached busybox image", agent_starts(top, small, args.runs), []))
        agent_starts(top, bigs[0], 1)
        rows.append((f"cached {args.size_mb} MB image", agent_starts(top, bigs[0], args.runs), []))
        first = [agent_starts(top, image, 1)[0] for image in bigs[1:]]
        rows.append((f"first start, {args.size_mb} MB image (unpack)", first, []))

        cluster = LocalCluster(top / "home")
        cluster.start_server()
        cluster.start_agent("node-a", "1xH100", "--image-cache", str(top / "cluster-cache"))
        cluster.wait_nodes("node-a")
        try:
            rows[0] = (rows[0][0], rows[0][1], cluster_starts(cluster, {}, args.runs))
            cluster_starts(cluster, {"image": small}, 1)
            rows[1] = (rows[1][0], rows[1][1], cluster_starts(cluster, {"image": small}, args.runs))
            cluster_starts(cluster, {"image": bigs[0]}, 1)
            cached = cluster_starts(cluster, {"image": bigs[0]}, args.runs)
            rows[2] = (rows[2][0], rows[2][1], cached)
            first = [cluster_starts(cluster, {"image": i}, 1)[0] for i in bigs[1:]]
            rows[3] = (rows[3][0], rows[3][1], first)
        finally:
            cluster.stop()
    table = Table(title=f"Task start in a container image (median of {args.runs} runs)")
    table.add_column("start")
    table.add_column("agent: start to exit of `true` (ms)", justify="right")
    table.add_column("cluster: submit to running (ms)", justify="right")
    for label, agent, whole in rows:
        table.add_row(label, ms(agent), ms(whole))
    console.print(table)
    console.print(f"big image: {size / 1e6:,.0f} MB archive (gzip, incompressible data)")


if __name__ == "__main__":
    main()
