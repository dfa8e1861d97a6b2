"""Jobs in container images (SPEC section 7) on a real server and agent: an OCI archive and
a ``docker save`` archive made here from busybox-static, run with bubblewrap as the job's
Unix account, with a read-only dataset, a writable mount, /dev/shm of ``shm_size`` and the
checkpoint directory; a missing image, a cancel, and refusals at submission."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.client import Client
from corral.errors import CorralError
from tests.e2e.accounts import CAN_ADD_USERS, unix_accounts
from tests.e2e.cluster import LocalCluster, wait_for
from tests.imagebuild import busybox_is_static, busybox_rootfs, docker_archive, oci_archive, tar_of

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not busybox_is_static() or not os.path.exists("/usr/bin/bwrap"),
        reason="needs bwrap (bubblewrap) and busybox-static",
    ),
]
FINAL = ("succeeded", "failed", "cancelled")


@dataclass
class Site:
    cluster: LocalCluster
    client: Client  # the job account's user (root's own when no account can be made)
    account: str
    base: Path

    def done(self, job_id: int, timeout: float = 60) -> object:
        return wait_for(
            lambda: (j := self.client.get(job_id)).state in FINAL and j, timeout, f"job {job_id}"
        )

    def output(self, job_id: int) -> str:
        self.done(job_id)
        return wait_for(lambda: self.client.logs(job_id) or " ", 10, "the log")


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with tempfile.TemporaryDirectory(prefix="crl-ctr-", dir="/tmp") as top:
        base = Path(top)
        os.chmod(base, 0o755)  # (the job's account reaches the images and mounts)
        layer = tar_of(busybox_rootfs(base / "rootfs"))
        oci_archive(base / "busybox.tar", [layer])
        docker_archive(base / "busybox-docker.tar", [layer])
        dataset = base / "dataset"
        dataset.mkdir(mode=0o755)
        (dataset / "input.txt").write_text("dataset line\n")
        os.chmod(dataset / "input.txt", 0o644)
        scratch = base / "scratch"
        scratch.mkdir()
        os.chmod(scratch, 0o1777)
        cluster = LocalCluster(base / "home", checkpoint_root=base / "checkpoints")
        with unix_accounts("ctr") if CAN_ADD_USERS else _no_account() as names:
            try:
                cluster.start_server()
                cluster.start_agent("node-a", "2xH100", "--image-cache", str(base / "images"))
                cluster.wait_nodes("node-a")
                if names:
                    made = cluster.cli("token", "create", "--user", names[0], "-o", "json")
                    client = Client(cluster.url, json.loads(made.stdout)["token"])
                else:
                    client = cluster.client()
                account = names[0] if names else "root"
                yield Site(cluster, client, account, base)
            finally:
                cluster.stop()


class _no_account:  # noqa: N801 -- a stand-in for unix_accounts() without root
    def __enter__(self) -> list[str]:
        return []

    def __exit__(self, *_: object) -> None:
        return None


SCRIPT = """
cat /data/input.txt
if touch /data/new 2>/dev/null; then echo dataset writable; else echo dataset read-only; fi
df -k /dev/shm | tail -1 | awk '{print "shm " $2}'
echo result > /scratch/out-$CORRAL_JOB_ID
echo weights > $CORRAL_CHECKPOINT_DIR/model.pt
echo "user $(id -un) rank $RANK of $WORLD_SIZE gpus $CUDA_VISIBLE_DEVICES $IMAGE_VAR"
cat /usr/share/hello.txt
"""


def test_a_job_runs_in_an_oci_archive_image_with_its_mounts(site: Site) -> None:
    job = site.client.submit(
        {
            "command": SCRIPT,
            "image": f"oci-archive:{site.base}/busybox.tar",
            "mounts": [f"{site.base}/dataset:/data:ro", f"{site.base}/scratch:/scratch"],
            "shm_size": "64MiB",
            "resources": {"gpus": 1},
            "grace_period": "2s",
        }
    )
    lines = site.output(job.id).splitlines()
    assert site.client.get(job.id).state == "succeeded", lines
    assert lines == [
        "dataset line",
        "dataset read-only",
        "shm 65536",
        f"user {site.account} rank 0 of 1 gpus 0 from-image",
        "hello from the image",
    ]
    # what it wrote on the node belongs to the job's account, not to root
    uid = int(subprocess.run(["id", "-u", site.account], capture_output=True, text=True).stdout)
    out = site.base / "scratch" / f"out-{job.id}"
    checkpoint = site.base / "checkpoints" / f"job-{job.id}" / "model.pt"
    assert out.read_text() == "result\n" and checkpoint.read_text() == "weights\n"
    assert out.stat().st_uid == uid and checkpoint.stat().st_uid == uid
    assert not (site.base / "dataset" / "new").exists()


def test_submit_flags_and_a_docker_archive(site: Site) -> None:
    result = site.cluster.cli(
        "submit",
        "--image",
        f"docker-archive:{site.base}/busybox-docker.tar",
        "--mount",
        f"{site.base}/dataset:/data:ro",
        "--shm-size",
        "32MiB",
        "--",
        "sh",
        "-c",
        "cat /data/input.txt; df -k /dev/shm | tail -1 | awk '{print $2}'; id -u",
    )
    job_id = int(result.stdout.strip())
    admin = site.cluster.client()
    wait_for(lambda: admin.get(job_id).state in FINAL, 60, "the job")
    assert admin.get(job_id).state == "succeeded"
    # the admin token is root's: root inside is the node's root, mapped to itself
    assert admin.logs(job_id).splitlines() == ["dataset line", "32768", "0"]
    shown = json.loads(site.cluster.cli("show", str(job_id), "-o", "json").stdout)
    assert shown["manifest"]["image"].startswith("docker-archive:")


def test_a_missing_image_fails_the_task_naming_it(site: Site) -> None:
    image = f"oci-archive:{site.base}/missing.tar"
    job = site.client.submit({"command": "true", "image": image})
    done = site.done(job.id)
    assert done.state == "failed"
    assert f"image {image}: not found on node node-a" in (done.reason or "")
    assert "corral: cannot start task: image" in site.output(job.id)


def test_cancel_stops_the_program_in_its_image(site: Site) -> None:
    script = (
        'trap "echo stopped > /scratch/term-$CORRAL_JOB_ID; exit 0" TERM; '
        "echo up > /scratch/up-$CORRAL_JOB_ID; while :; do sleep 0.2; done"
    )
    job = site.client.submit(
        {
            "command": script,
            "image": f"oci-archive:{site.base}/busybox.tar",
            "mounts": [f"{site.base}/scratch:/scratch"],
            "grace_period": "10s",
        }
    )
    wait_for(lambda: (site.base / "scratch" / f"up-{job.id}").exists(), 60, "the job to run")
    site.client.cancel(job.id)
    wait_for(lambda: (site.base / "scratch" / f"term-{job.id}").exists(), 20, "SIGTERM to reach it")
    task = wait_for(
        lambda: (t := site.client.get(job.id).tasks[0]).state == "exited" and t, 30, "exit"
    )
    assert site.client.get(job.id).state == "cancelled" and task.exit_code == 0
    if site.account != "root":  # nothing of the account is left running on the node
        wait_for(lambda: not _live_processes(site.account), 10, "its processes to be gone")


def _live_processes(account: str) -> list[str]:
    """The account's processes, less zombies (bwrap's reaper inside the container may be
    left for the node's init to reap)."""
    ps = subprocess.run(["ps", "-o", "stat=,args=", "-u", account], capture_output=True, text=True)
    return [line for line in ps.stdout.splitlines() if not line.strip().startswith("Z")]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"mounts": ["/tmp"]}, "mounts: only with an image"),
        ({"image": "/x", "mounts": ["/proc:/p"]}, "system path"),
        ({"image": "/x", "mounts": ["/a:/data", "/b:/data"]}, "mounted twice"),
        ({"image": "/x", "shm_size": "100TB"}, "shm_size: .* is more than the memory of any node"),
    ],
)
def test_bad_containers_are_refused_at_submission(site: Site, fields: dict, problem: str) -> None:
    with pytest.raises(CorralError, match=problem) as caught:
        site.client.submit({"command": "true", **fields})
    assert caught.value.status_code == 422
