"""Tasks in container images: how the image is laid out for bwrap, the GPU device and
driver files, the environment, and real tasks run in a busybox image by the supervisor
(exit codes, SIGTERM reaching the program, failures and stops before the start)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.agent.container import (
    ContainerRequest,
    ContainerRuntime,
    HostDevices,
    Op,
    accounts_files,
    container_env,
    driver_libraries,
    image_args,
    plan_splices,
    wrap_with_files,
)
from corral.agent.identity import Account, lookup_account
from corral.agent.images import Image, ImageCache
from corral.agent.staging import Staging
from corral.agent.supervisor import ProcessSupervisor, TaskLaunch, TaskState
from corral.core.container import Mount, parse_image
from tests.imagebuild import busybox_is_static, busybox_rootfs, oci_archive, tar_of
from tests.unit.agent.helpers import MODES, cgroups_for
from tests.unit.agent.test_supervisor import wait_for

ROOT = os.geteuid() == 0
BWRAP = shutil.which("bwrap")
pytestmark = [pytest.mark.timeout(90)]


def fake_root(path: Path) -> Path:
    for name in ("etc", "usr/local/bin", "usr/lib", "data"):
        (path / name).mkdir(parents=True)
    (path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (path / "etc/hosts").symlink_to("/run/hosts")  # a link: never a mount point
    (path / "bin").symlink_to("usr/bin")
    (path / "usr/local/bin/tool").write_text("")
    return path


def test_the_image_is_bound_entry_by_entry_where_mount_points_are_missing(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "root")
    ops = [
        Op(("--proc",), "/proc"),
        Op(("--ro-bind-data", "5"), "/etc/passwd", is_dir=False),  # over the image's
        Op(("--ro-bind", "/etc/hosts"), "/etc/hosts", is_dir=False),  # a link there
        Op(("--ro-bind", "/lib/x.so"), "/usr/local/nvidia/lib64/x.so", is_dir=False),
        Op(("--bind", "/scratch"), "/scratch"),
        Op(("--bind", "/data"), "/data"),  # exists in the image
        Op(("--bind", "/ck"), "/scratch/ck/job-1"),  # inside another op's mount
        Op(("--dev-bind", "/dev/nvidia0"), "/dev/nvidia0", is_dir=False),
    ]
    spliced, omitted = plan_splices(str(root), ops)
    assert spliced == {"/", "/etc", "/usr/local"}
    assert omitted == {
        "/proc",
        "/etc/hosts",
        "/usr/local/nvidia",
        "/scratch",
        "/data",
    }
    args = image_args(str(root), ops)
    r = str(root)
    assert args == [
        "--symlink", "usr/bin", "/bin",
        "--ro-bind", f"{r}/usr", "/usr",
        "--tmpfs", "/etc",
        "--ro-bind", f"{r}/etc/passwd", "/etc/passwd",
        "--tmpfs", "/usr/local",
        "--ro-bind", f"{r}/usr/local/bin", "/usr/local/bin",
    ]  # fmt: skip


def test_driver_libraries_from_ldconfig(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.550.54").write_text("")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.550.54")
    (lib / "libnvidia-ml.so.1").write_text("")
    (lib / "libc.so.6").write_text("")
    text = f"""\
4 libs found in cache `/etc/ld.so.cache'
\tlibnvidia-ml.so.1 (libc6,x86-64) => {lib}/libnvidia-ml.so.1
\tlibcuda.so.1 (libc6,x86-64) => {lib}/libcuda.so.1
\tlibcuda.so.1 (libc6) => /usr/lib32/libcuda.so.1
\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => {lib}/libc.so.6
"""
    assert driver_libraries(text, "x86_64") == {
        "libnvidia-ml.so.1": f"{lib}/libnvidia-ml.so.1",
        "libcuda.so.1": f"{lib}/libcuda.so.550.54",
        "libcuda.so.550.54": f"{lib}/libcuda.so.550.54",
    }


@pytest.mark.skipif(not ROOT, reason="needs root (mknod)")
def test_gpu_device_files_by_minor_number(tmp_path: Path) -> None:
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    for name, minor in [("nvidia0", 0), ("nvidia1", 1), ("nvidia2", 2), ("nvidiactl", 255)]:
        os.mknod(dev / name, 0o666 | 0o020000, os.makedev(195, minor))
    (dev / "nvidia-caps").mkdir()
    (dev / "nvidia-uvm").write_text("not a device")
    # NVML index order is PCI order; the minors need not follow it
    for bus, minor in [("0000:3b:00.0", 2), ("0000:18:00.0", 1), ("0000:86:00.0", 0)]:
        (proc / "driver/nvidia/gpus" / bus).mkdir(parents=True)
        (proc / "driver/nvidia/gpus" / bus / "information").write_text(
            f"Model: H100\nDevice Minor: {minor}\n"
        )
    devices = HostDevices(dev, proc, ldconfig="")
    assert devices.minors() == {0: 1, 1: 2, 2: 0}
    assert devices.gpu_files([2, 0]) == [
        str(dev / "nvidia1"),
        str(dev / "nvidia0"),
        str(dev / "nvidiactl"),
    ]
    assert devices.gpu_files([]) == []
    assert devices.extra_dirs(mig=True) == [str(dev / "nvidia-caps")]
    assert devices.extra_dirs(mig=False) == []


def test_the_environment_in_a_container(tmp_path: Path) -> None:
    image = Image(
        parse_image("/rootfs"), tmp_path, {"Env": ["PATH=/opt/conda/bin:/usr/bin", "X=img"]}
    )
    launch_env = {
        "PATH": "/host/venv/bin:/usr/bin",  # the agent's
        "LD_LIBRARY_PATH": "/host/lib",
        "CORRAL_PYTHON": "/host/venv/bin/python",
        "RANK": "3",
        "LOCAL_WORLD_SIZE": "2",
        "CUDA_VISIBLE_DEVICES": "5",
        "X": "job",
    }
    request = ContainerRequest(
        "/rootfs", gpus=(5,), node_gpus=(4, 5), job_env={"RANK": "3", "X": "job"}
    )
    env = container_env(launch_env, request, image, (4, 5), driver=True)
    assert env == {
        "PATH": "/opt/conda/bin:/usr/bin:/usr/local/nvidia/bin",
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
        "RANK": "3",
        "LOCAL_WORLD_SIZE": "2",
        "CUDA_VISIBLE_DEVICES": "1",  # the second of the two GPUs the container sees
        "X": "job",
        "NCCL_SHM_DISABLE": "1",  # its local peer's /dev/shm is not its own
        "CORRAL_IMAGE": "/rootfs",
    }
    # a job's own PATH wins; MIG instances keep their names; no image Env: a default PATH
    mig = {"PATH": "/mine", "CUDA_VISIBLE_DEVICES": "MIG-abc", "LOCAL_WORLD_SIZE": "1"}
    bare = Image(parse_image("/rootfs"), tmp_path)
    request = ContainerRequest("/rootfs", gpus=(0,), job_env={"PATH": "/mine"})
    env = container_env(mig, request, bare, (0,), driver=False)
    assert env["PATH"] == "/mine" and env["CUDA_VISIBLE_DEVICES"] == "MIG-abc"
    assert "NCCL_SHM_DISABLE" not in env and "LD_LIBRARY_PATH" not in env
    env = container_env({}, ContainerRequest("/rootfs"), bare, (), driver=True)
    assert env["PATH"].startswith("/usr/local/sbin:") and "LD_LIBRARY_PATH" not in env


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A temporary directory every account may enter."""
    with tempfile.TemporaryDirectory(dir="/tmp") as name:
        os.chmod(name, 0o755)
        yield Path(name)


def test_passwd_and_group_hold_the_account(public_tmp: Path) -> None:
    root = fake_root(public_tmp / "root")
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/h:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\nstaff:x:4242:\n")
    account = Account("alice", 4242, 4242, (4242,), "/home/alice", "/bin/bash")
    passwd, group = accounts_files(Image(parse_image("/x"), root), account)
    assert passwd == "root:x:0:0::/root:/bin/sh\nalice:x:4242:4242:alice:/home/alice:/bin/sh\n"
    assert group.splitlines()[0] == "root:x:0:" and group.splitlines()[-1].endswith(":x:4242:")
    assert "staff:x:4242:" not in group.splitlines()[:-1]


def test_files_reach_the_runtime_as_here_documents(tmp_path: Path) -> None:
    import subprocess

    argv = wrap_with_files(["/bin/sh", "-c", "cat <&5; cat <&6"], {5: "a\nb\n", 6: "EOF\nc\n"})
    assert subprocess.run(argv, capture_output=True, text=True).stdout == "a\nb\nEOF\nc\n"


# -- real tasks in a busybox image -------------------------------------------------------

needs_bwrap = pytest.mark.skipif(
    BWRAP is None or not busybox_is_static(), reason="needs bwrap and busybox-static"
)


@dataclass
class Box:
    top: Path
    archive: str
    staging: Staging
    account: Account | None
    exits: list[str]

    def launch(self, key: str, command: str, **extra: object) -> TaskLaunch:
        extra.setdefault("account", self.account)
        return TaskLaunch(
            key=key,
            command=command,
            env={"PATH": "/usr/bin:/bin", "RANK": "0"},
            workdir=None,
            log_path=self.top / "logs" / f"{key}.log",
            grace_period=float(extra.pop("grace", 5.0)),  # type: ignore[arg-type]
            **extra,  # type: ignore[arg-type]
        )

    def request(self, **extra: object) -> ContainerRequest:
        fields = {
            "image": self.archive,
            "checkpoint_dir": str(self.top / "ck"),
            "job_env": {"RANK": "0"},
        }
        return ContainerRequest(**{**fields, **extra})  # type: ignore[arg-type]

    def done(self, key: str, timeout: float = 20) -> object:
        return wait_for(
            lambda: (s := self.staging.status(key)) and s.state is TaskState.EXITED and s,
            timeout,
            f"task {key} to end",
        )

    def log(self, key: str) -> str:
        return (self.top / "logs" / f"{key}.log").read_text()


@pytest.fixture(params=MODES)
def box(request: pytest.FixtureRequest) -> Iterator[Box]:
    if BWRAP is None or not busybox_is_static():
        pytest.skip("needs bwrap and busybox-static")
    cgroups = cgroups_for(request.param)
    with tempfile.TemporaryDirectory(prefix="crl-box-", dir="/tmp") as name:
        top = Path(name)
        os.chmod(top, 0o755)
        account = lookup_account("nobody") if ROOT else None
        key = "img.tar"
        oci_archive(top / key, [tar_of(busybox_rootfs(top / "rootfs"))])
        (top / "ck").mkdir(mode=0o777)
        os.chmod(top / "ck", 0o777)
        exits: list[str] = []
        supervisor = ProcessSupervisor(on_exit=exits.append, cgroups=cgroups)
        runtime = ContainerRuntime(ImageCache(top / "cache", node="n1"), "n1", 1 << 34)
        staging = Staging(supervisor, runtime, on_change=exits.append)
        yield Box(top, f"oci-archive:{top}/{key}", staging, account, exits)
        staging.stop_all(grace_period=0)


@needs_bwrap
def test_a_task_runs_in_its_image_with_its_exit_code(box: Box) -> None:
    status = box.staging.start(
        box.launch("t1", "cat /usr/share/hello.txt; id -u; echo $RANK $CORRAL_IMAGE; exit 3"),
        box.request(),
    )
    assert status.state is TaskState.STARTING
    done = box.done("t1")
    assert done.exit_code == 3, box.log("t1")
    uid = box.account.uid if box.account else os.geteuid()
    assert box.log("t1").splitlines() == ["hello from the image", str(uid), f"0 {box.archive}"]
    box.staging.forget("t1")
    assert box.staging.status("t1") is None


@needs_bwrap
def test_sigterm_reaches_the_program_and_its_exit_code_is_kept(box: Box) -> None:
    """The runtime (bwrap) outlives the SIGTERM that stops the task: the program's own exit
    (here 0, after its handler ran) is the task's."""
    script = (
        'trap "echo got TERM > $CK/term; exit 0" TERM; echo ready > $CK/ready; '
        "while :; do sleep 0.1; done"
    )
    launch = box.launch("t2", script)
    launch.env["CK"] = str(box.top / "ck")
    box.staging.start(launch, box.request())
    wait_for(lambda: (box.top / "ck/ready").exists(), 20, "the program to start")
    box.staging.stop("t2")
    done = box.done("t2")
    assert (box.top / "ck/term").read_text() == "got TERM\n"
    assert done.exit_code == 0, box.log("t2")


@needs_bwrap
def test_a_stubborn_program_is_killed_at_the_deadline(box: Box) -> None:
    launch = box.launch("t3", 'trap "" TERM; echo ready > $CK/ready3; sleep 60', grace=0.5)
    launch.env["CK"] = str(box.top / "ck")
    box.staging.start(launch, box.request())
    wait_for(lambda: (box.top / "ck/ready3").exists(), 20, "the program to start")
    began = time.monotonic()
    box.staging.stop("t3")
    assert box.done("t3").exit_code in (137, 143)
    assert time.monotonic() - began < 15


@needs_bwrap
def test_a_task_whose_image_cannot_be_had_fails_naming_it(box: Box) -> None:
    box.staging.start(box.launch("t4", "true"), box.request(image=f"oci-archive:{box.top}/no.tar"))
    done = box.done("t4")
    assert done.exit_code == 127
    assert done.reason == f"image oci-archive:{box.top}/no.tar: not found on node n1"
    assert "corral: cannot start task: image oci-archive:" in box.log("t4")
    wait_for(lambda: "t4" in box.exits, 5, "on_exit")
    mount = Mount(str(box.top / "nowhere"), "/data")
    box.staging.start(box.launch("t5", "true"), box.request(mounts=(mount,)))
    assert "does not exist on node n1" in str(box.done("t5").reason)
    box.staging.start(box.launch("t6", "true"), box.request(workdir="/nowhere"))
    assert "workdir /nowhere is neither in image" in str(box.done("t6").reason)


@needs_bwrap
def test_a_task_stopped_while_its_image_is_prepared_never_starts(box: Box) -> None:
    fifo = box.top / "slow.tar"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o666)
    # (read as the agent itself: for another account, a fifo is refused at once)
    launch = box.launch("t7", "touch $CK/started", account=None)
    box.staging.start(launch, box.request(image=f"oci-archive:{fifo}"))
    time.sleep(0.3)  # the preparer waits on the fifo
    assert box.staging.status("t7").state is TaskState.STARTING
    box.staging.stop("t7")
    done = box.staging.status("t7")
    assert (done.state, done.exit_code) == (TaskState.EXITED, 143)
    assert "stopped before it started" in str(done.reason)

    def unblock() -> None:
        with open(fifo, "wb") as writer:
            writer.write(b"x" * 1024)

    threading.Thread(target=unblock, daemon=True).start()
    time.sleep(1.0)
    assert box.staging.status("t7").exit_code == 143 and not (box.top / "ck/started").exists()


@needs_bwrap
def test_a_readopted_task_keeps_its_image_from_eviction(box: Box) -> None:
    """An agent restarted while a task runs in an image leases the image again: eviction
    (here: of everything, past a size of 0) spares it until the task is gone."""
    state = box.top / "state"
    cache = ImageCache(box.top / "cache2", node="n1")
    first = Staging(ProcessSupervisor(state_dir=state), ContainerRuntime(cache, "n1"))
    launch = box.launch("t8", "echo up > $CK/up8; sleep 60", grace=0.1)
    launch.env["CK"] = str(box.top / "ck")
    first.start(launch, box.request())
    wait_for(lambda: (box.top / "ck/up8").exists(), 20, "the program to start")
    key = cache.entries()[0].key
    cache.limit = 0
    first.detach()  # the agent goes away, the task keeps running
    for image in list(first._images.values()):  # noqa: SLF001 -- its process would be gone
        if not isinstance(image, int):
            cache.release(image)
    second = Staging(ProcessSupervisor(state_dir=state), ContainerRuntime(cache, "n1"))
    [(adopted, status)] = second.recover()
    assert adopted.meta["image_key"] == key and status.state is TaskState.RUNNING
    assert cache.evict() == [] and [e.key for e in cache.entries()] == [key]
    second.stop("t8", 0)
    wait_for(lambda: second.status("t8").state is TaskState.EXITED, 20, "the stop")
    second.forget("t8")
    assert cache.evict() == [key]


@needs_bwrap
@pytest.mark.skipif(not ROOT, reason="needs root (a task of another account)")
def test_a_cache_out_of_the_accounts_reach_fails_the_task_saying_so(box: Box) -> None:
    private = box.top / "private"
    private.mkdir(mode=0o700)
    runtime = ContainerRuntime(ImageCache(private / "images", node="n1"), "n1")
    staging = Staging(ProcessSupervisor(), runtime)
    staging.start(box.launch("t9", "true"), box.request())
    done = wait_for(
        lambda: (s := staging.status("t9")) and s.state is TaskState.EXITED and s, 20, "the end"
    )
    assert "the image cache is out of reach of the job's account" in str(done.reason)
