"""Running a task in a container image with bubblewrap (``bwrap``).

The shim drops to the job's account as for any task and runs ``bwrap`` as that account:
``--unshare-user`` maps the account to itself (same uid and gid inside), so files it
creates on mounts are its own, and it gets no privilege it does not have on the node;
``--unshare-pid`` gives it its own process tree and /proc; the network is the node's. The
task's cgroup holds bwrap and everything under it (the shim is moved in before it runs).

What the container sees, in this order (bwrap applies its arguments in order):

- the image's root filesystem, read-only: each top-level entry bound into bwrap's own root
  (a tmpfs), and a directory of the image re-created as a tmpfs of bound entries wherever
  a mount point is missing from it (the image itself is never written);
- ``/proc`` (its own), ``/dev`` (a minimal one: null, zero, random, tty, pts...),
  ``/sys`` (the node's, read-only), ``/tmp`` (a tmpfs), ``/dev/shm`` (a tmpfs of
  ``shm_size``);
- the device files of the GPUs its job holds on the node (``/dev/nvidia<minor>``) and the
  driver's control files (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``,
  ``/dev/nvidia-modeset``; ``/dev/nvidia-caps`` for MIG), ``/dev/infiniband`` when present;
- the node's NVIDIA driver libraries (``ldconfig -p``: ``libcuda.so*``, ``libnvidia-*.so*``
  ...) and tools (``nvidia-smi``...) under ``/usr/local/nvidia/lib64`` and ``/bin``, as
  CUDA images expect (their ``LD_LIBRARY_PATH`` and ``PATH`` name these directories);
- the node's ``/etc/hosts`` and ``/etc/resolv.conf``; ``/etc/passwd`` and ``/etc/group``:
  the image's with the account added;
- the job's checkpoint directory at its own path, then the job's ``mounts``.

The environment is the task's, over the image's ``Env``; the node's own search paths give
way to the image's. ``CUDA_VISIBLE_DEVICES`` names the task's GPUs among those the
container sees (``0,1,...``).
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import platform
import re
import secrets
import shutil
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from corral.agent.identity import Account, current_account
from corral.agent.images import Image, ImageCache, ImageError
from corral.agent.oci import Folder, open_as
from corral.agent.taskstate import TaskLaunch
from corral.core.container import Mount

log = logging.getLogger(__name__)

RUNTIME = "bwrap"
DRIVER_DIR = "/usr/local/nvidia"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DRIVER_LIBRARIES = (
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-",
    "libnvcuvid.so",
    "libnvoptix.so",
    "libEGL_nvidia.so",
    "libGLX_nvidia.so",
    "libGLESv1_CM_nvidia.so",
    "libGLESv2_nvidia.so",
)
DRIVER_TOOLS = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
# the node's own paths in the agent's environment: meaningless in an image
HOST_PATHS = ("PATH", "LD_LIBRARY_PATH", "TMPDIR", "CORRAL_PYTHON")
LDCONFIG_ARCH = {"x86_64": "x86-64", "aarch64": "AArch64", "ppc64le": "ppc64le"}
MAX_ACCOUNTS_FILE = 32 << 10  # bytes of an image's passwd or group kept (one argument of
# the runtime's command line holds both: the kernel limits one to 128 KiB)


class ContainerError(Exception):
    """A task that cannot start in its container; the message says why."""


@dataclass(frozen=True)
class ContainerRequest:
    """What one task's container holds. ``gpus`` are the task's own (node indices),
    ``node_gpus`` every GPU its job holds on the node; ``job_env`` what the server set
    (the rest of the launch's environment came from the agent's own)."""

    image: str
    mounts: tuple[Mount, ...] = ()
    shm_size: int | None = None
    gpus: tuple[int, ...] = ()
    node_gpus: tuple[int, ...] = ()
    checkpoint_dir: str | None = None
    workdir: str | None = None
    job_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Op:
    """One bwrap operation on ``dest``: ``args`` before it, ``is_dir``: what it puts
    there (a directory, else a file), for the mount point."""

    args: tuple[str, ...]
    dest: str
    is_dir: bool = True

    @property
    def argv(self) -> list[str]:
        return [*self.args, self.dest]


@dataclass
class HostDevices:
    """The node's GPU device files and driver files (``dev``, ``proc``: for tests)."""

    dev: Path = Path("/dev")
    proc: Path = Path("/proc")
    ldconfig: str | None = None  # ``ldconfig -p`` output (None: run it once when needed)
    _driver: tuple[dict[str, str], dict[str, str]] | None = None

    def minors(self) -> dict[int, int]:
        """GPU index (NVML's order: by PCI bus id) to device minor number."""
        found = []
        with contextlib.suppress(OSError):
            for entry in sorted((self.proc / "driver/nvidia/gpus").iterdir()):
                text = (entry / "information").read_text()
                match = re.search(r"Device Minor:\s*(\d+)", text)
                if match:
                    found.append(int(match.group(1)))
        return dict(enumerate(found))

    def gpu_files(self, indices: Sequence[int]) -> list[str]:
        """The device files of GPUs ``indices`` and the driver's control files, that exist."""
        if not indices:
            return []
        minors = self.minors()
        files = [str(self.dev / f"nvidia{minors.get(i, i)}") for i in sorted(set(indices))]
        files += [str(self.dev / name) for name in CONTROL_DEVICES]
        return [f for f in files if _is_device(f)]

    def extra_dirs(self, mig: bool) -> list[str]:
        names = ["infiniband", *(["nvidia-caps"] if mig else [])]
        return [str(self.dev / n) for n in names if (self.dev / n).is_dir()]

    def driver(self) -> tuple[dict[str, str], dict[str, str]]:
        """The driver's libraries and tools: name in the container -> file on the node."""
        if self._driver is None:
            text = self.ldconfig if self.ldconfig is not None else _ldconfig()
            self._driver = (driver_libraries(text), driver_tools())
        return self._driver


def driver_libraries(ldconfig: str, machine: str | None = None) -> dict[str, str]:
    """The NVIDIA driver libraries ``ldconfig -p`` lists for this machine's architecture:
    each name (and its file's own name) -> the file."""
    arch = LDCONFIG_ARCH.get(machine or platform.machine(), "")
    found: dict[str, str] = {}
    for line in ldconfig.splitlines():
        match = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if not match:
            continue
        name, tags, path = match.groups()
        if not name.startswith(DRIVER_LIBRARIES) or (arch and arch not in tags):
            continue
        real = os.path.realpath(path)
        if os.path.isfile(real):
            found.setdefault(name, real)
            found.setdefault(os.path.basename(real), real)
    return found


def driver_tools() -> dict[str, str]:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/usr/sbin", "/bin"])
    tools = {}
    for name in DRIVER_TOOLS:
        found = shutil.which(name, path=path)
        if found:
            tools[name] = os.path.realpath(found)
    return tools


def _ldconfig() -> str:
    binary = shutil.which("ldconfig") or shutil.which("ldconfig", path="/sbin:/usr/sbin")
    if binary is None:
        return ""
    try:
        return subprocess.run(
            [binary, "-p"], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _is_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


class ContainerRuntime:
    """Turns a task's launch into one that runs in its image (see the module's doc)."""

    def __init__(
        self,
        cache: ImageCache,
        node: str = "",
        memory: int = 0,
        devices: HostDevices | None = None,
        bwrap: str | None = None,
    ) -> None:
        self.cache = cache
        self.node = node
        self.memory = memory  # bytes of the node's memory (0: unknown)
        self.devices = devices or HostDevices()
        self.bwrap = bwrap if bwrap is not None else shutil.which(RUNTIME)

    def describe(self) -> str:
        if self.bwrap is None:
            return (
                "containers unavailable: no bwrap (package bubblewrap); tasks of jobs with an "
                "image fail here"
            )
        limit = self.cache.limit / 1000**3
        return f"containers: {self.bwrap}, image cache {self.cache.directory} ({limit:g} GB)"

    def prepare(
        self, launch: TaskLaunch, request: ContainerRequest, account: Account | None
    ) -> tuple[TaskLaunch, Image]:
        """The launch that runs ``launch`` in its image, and the image (a lease to give
        back when the task is gone). Raises ContainerError saying why it cannot."""
        where = f"node {self.node}" if self.node else "this node"
        if self.bwrap is None:
            raise ContainerError(
                f"image {request.image}: {where} cannot run containers: no bwrap "
                "(install the bubblewrap package)"
            )
        if request.shm_size and self.memory and request.shm_size > self.memory:
            raise ContainerError(
                f"shm_size: {request.shm_size:,} bytes is more than the memory of {where} "
                f"({self.memory:,} bytes)"
            )
        for mount in request.mounts:
            if not os.path.exists(mount.source):
                raise ContainerError(f"mount {mount}: {mount.source} does not exist on {where}")
            checkpoint = request.checkpoint_dir
            if checkpoint and (
                checkpoint == mount.target or checkpoint.startswith(mount.target + "/")
            ):
                raise ContainerError(
                    f"mount {mount}: its container path would cover the job's checkpoint "
                    f"directory {checkpoint}"
                )
        who = account or current_account()
        try:
            image = self.cache.acquire(request.image, account)
        except ImageError as exc:
            raise ContainerError(str(exc)) from None
        try:
            if image.key is not None:
                _reachable_by(image, account)
            final = self._launch(launch, request, who, image)
        except BaseException:
            self.cache.release(image)
            raise
        return final, image

    def _launch(
        self, launch: TaskLaunch, request: ContainerRequest, who: Account, image: Image
    ) -> TaskLaunch:
        root = str(image.root)
        workdir = request.workdir or image.config.get("WorkingDir") or "/"
        if not _reachable(workdir, root, request):
            raise ContainerError(
                f"workdir {workdir} is neither in image {request.image} nor under one of the "
                "job's mounts"
            )
        gpus = request.node_gpus or request.gpus
        ops = self._ops(request, gpus, launch.env)
        argv = [self.bwrap or RUNTIME, *image_args(root, ops)]
        for op in sorted(ops, key=lambda o: o.dest.count("/")):
            argv += op.argv
        argv += ["--chdir", workdir, "--unshare-user", "--uid", str(who.uid)]
        argv += ["--gid", str(who.gid), "--unshare-pid", "--die-with-parent", "--"]
        command = launch.command
        argv += ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        passwd, group = accounts_files(image, who)
        driver = bool(gpus) and bool(self.devices.driver()[0])
        env = container_env(launch.env, request, image, gpus, driver)
        return replace(
            launch,
            command=wrap_with_files(argv, {5: passwd, 6: group}),
            env=env,
            workdir=None,
            runtime=RUNTIME,
            meta={**launch.meta, "image_key": image.key},
        )

    def _ops(
        self, request: ContainerRequest, gpus: Sequence[int], env: Mapping[str, str]
    ) -> list[Op]:
        ops = [
            Op(("--proc",), "/proc"),
            Op(("--dev",), "/dev"),
            Op(("--ro-bind", "/sys"), "/sys"),
            Op(("--perms", "1777", "--tmpfs"), "/tmp"),
            Op(
                (
                    "--perms",
                    "1777",
                    *(("--size", str(request.shm_size)) if request.shm_size else ()),
                    "--tmpfs",
                ),
                "/dev/shm",
            ),
            Op(("--ro-bind-data", "5"), "/etc/passwd", is_dir=False),
            Op(("--ro-bind-data", "6"), "/etc/group", is_dir=False),
        ]
        for name in ("hosts", "resolv.conf"):
            if os.path.exists(f"/etc/{name}"):
                ops.append(Op(("--ro-bind", f"/etc/{name}"), f"/etc/{name}", is_dir=False))
        mig = env.get("CUDA_VISIBLE_DEVICES", "").startswith("MIG-")
        if gpus:
            for device in self.devices.gpu_files(gpus):
                ops.append(Op(("--dev-bind", device), device, is_dir=False))
            libraries, tools = self.devices.driver()
            for name, path in sorted(libraries.items()):
                ops.append(Op(("--ro-bind", path), f"{DRIVER_DIR}/lib64/{name}", is_dir=False))
            for name, path in sorted(tools.items()):
                ops.append(Op(("--ro-bind", path), f"{DRIVER_DIR}/bin/{name}", is_dir=False))
        for directory in self.devices.extra_dirs(mig and bool(gpus)):
            ops.append(Op(("--dev-bind", directory), directory))
        if request.checkpoint_dir:
            ops.append(Op(("--bind", request.checkpoint_dir), request.checkpoint_dir))
        for mount in request.mounts:
            kind = "--ro-bind" if mount.read_only else "--bind"
            ops.append(Op((kind, mount.source), mount.target, is_dir=os.path.isdir(mount.source)))
        return ops


def _reachable_by(image: Image, account: Account | None) -> None:
    """ContainerError unless ``account`` may enter the cached root filesystem (every
    directory above the cache must be searchable by the jobs' accounts)."""
    try:
        Folder.at(str(image.root), account).close()
    except OSError as exc:
        raise ContainerError(
            f"image {image.ref.text}: the image cache is out of reach of the job's account "
            f"({exc.strerror}: {exc.filename}); every directory above it must be searchable "
            "by all accounts (chmod o+x), see corral agent --image-cache"
        ) from None


def image_args(root: str, ops: Sequence[Op]) -> list[str]:
    """The bwrap arguments that lay the image ``root`` out (read-only) in the container,
    with a mount point for every op (see ``plan_splices``)."""
    spliced, omitted = plan_splices(root, ops)
    args = _entries(root, "/", spliced, omitted)
    for directory in sorted(spliced - {"/"}, key=lambda p: p.count("/")):
        args += ["--tmpfs", directory, *_entries(root, directory, spliced, omitted)]
    return args


def plan_splices(root: str, ops: Sequence[Op]) -> tuple[set[str], set[str]]:
    """Which directories of the image become a tmpfs of bound entries (``spliced``: bwrap
    can make mount points there) and which of their entries are left out (``omitted``: the
    ops' own). A directory of the image is bound whole unless an op's mount point is missing
    from it (or is a symbolic link, or of another type); the root is always spliced.
    Destinations under another op's are inside that op's content, not the image's."""
    spliced, omitted = {"/"}, set()
    dests = {op.dest for op in ops}
    for op in ops:
        if op.dest.startswith("/dev/"):
            continue  # /dev is bwrap's own
        parts = [p for p in op.dest.split("/") if p]
        current = "/"
        for index, name in enumerate(parts):
            child = current.rstrip("/") + "/" + name
            last = index == len(parts) - 1
            if not last and child in dests:
                break
            try:
                info = os.lstat(root + child)
            except OSError:
                info = None
            real_dir = info is not None and stat.S_ISDIR(info.st_mode)
            if current in spliced:
                if last or not real_dir:
                    omitted.add(child)
                    break
            elif last:
                fits = info is not None and (real_dir if op.is_dir else stat.S_ISREG(info.st_mode))
                if not fits:
                    spliced.add(current)
                    omitted.add(child)
                break
            elif not real_dir:
                spliced.add(current)
                omitted.add(child)
                break
            current = child
    return spliced, omitted


def _entries(root: str, directory: str, spliced: set[str], omitted: set[str]) -> list[str]:
    args: list[str] = []
    try:
        names = sorted(os.listdir(root + directory))
    except OSError:
        return args
    for name in names:
        dest = directory.rstrip("/") + "/" + name
        if dest in omitted or dest in spliced:
            continue
        source = root + dest
        try:
            info = os.lstat(source)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            args += ["--symlink", os.readlink(source), dest]
        elif stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
            args += ["--ro-bind", source, dest]
    return args


def _reachable(workdir: str, root: str, request: ContainerRequest) -> bool:
    """Whether ``workdir`` is a directory in the container: in the image, in a mount, the
    checkpoint directory or /tmp."""
    if workdir in ("/", "/tmp"):
        return True
    places = [(m.target, m.source) for m in request.mounts]
    if request.checkpoint_dir:
        places.append((request.checkpoint_dir, request.checkpoint_dir))
    for target, source in sorted(places, key=lambda p: len(p[0]), reverse=True):
        if workdir == target or workdir.startswith(target + "/"):
            return os.path.isdir(source + workdir[len(target) :])
    return _image_dir(root, workdir)


def _image_dir(root: str, path: str) -> bool:
    """Whether ``path`` is a directory of the image, links followed inside it."""
    todo = list(reversed([p for p in path.split("/") if p]))
    done: list[str] = []
    for _ in range(256):
        if not todo:
            return True
        part = todo.pop()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, part)
        try:
            info = os.lstat(here)
        except OSError:
            return False
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            todo.extend(reversed([p for p in target.split("/") if p]))
        elif stat.S_ISDIR(info.st_mode):
            done.append(part)
        else:
            return False
    return False


def container_env(
    env: Mapping[str, str],
    request: ContainerRequest,
    image: Image,
    gpus: Sequence[int],
    driver: bool,
) -> dict[str, str]:
    """The task's environment in the container: the image's ``Env``, then the launch's,
    less the node's own paths (the image's, or a default ``PATH``, instead)."""
    base = {}
    for item in image.config.get("Env") or []:
        if isinstance(item, str) and "=" in item:
            key, value = item.split("=", 1)
            base[key] = value
    out = dict(base)
    for key, value in env.items():
        from_node = key not in request.job_env and key in HOST_PATHS
        if not from_node:
            out[key] = value
    out.setdefault("PATH", DEFAULT_PATH)
    if driver and gpus:
        out["PATH"] = _join(out["PATH"], f"{DRIVER_DIR}/bin", first=False)
        out["LD_LIBRARY_PATH"] = _join(out.get("LD_LIBRARY_PATH", ""), f"{DRIVER_DIR}/lib64")
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if request.gpus and not visible.startswith("MIG-"):
        seen = sorted(set(gpus))
        out["CUDA_VISIBLE_DEVICES"] = ",".join(
            str(seen.index(g)) for g in request.gpus if g in seen
        )
    if int(env.get("LOCAL_WORLD_SIZE") or 1) > 1 and "NCCL_SHM_DISABLE" not in request.job_env:
        out["NCCL_SHM_DISABLE"] = "1"  # its local peers have /dev/shm of their own
    out["CORRAL_IMAGE"] = request.image
    return out


def _join(paths: str, entry: str, first: bool = True) -> str:
    items = [p for p in paths.split(":") if p and p != entry]
    return ":".join([entry, *items] if first else [*items, entry])


def accounts_files(image: Image, account: Account) -> tuple[str, str]:
    """``/etc/passwd`` and ``/etc/group`` for the container: the image's (read as the
    account), with the account and its primary group in place of any same name or id."""
    try:
        group_name = grp.getgrgid(account.gid).gr_name
    except KeyError:
        group_name = account.name
    passwd = _lines(image, "passwd", account, (account.name, str(account.uid)))
    passwd.append(
        f"{account.name}:x:{account.uid}:{account.gid}:{account.name}:{account.home}:/bin/sh"
    )
    groups = _lines(image, "group", account, (group_name, str(account.gid)))
    groups.append(f"{group_name}:x:{account.gid}:")
    return "\n".join(passwd) + "\n", "\n".join(groups) + "\n"


def _lines(image: Image, name: str, account: Account, drop: tuple[str, str]) -> list[str]:
    path = os.path.join(str(image.root), "etc", name)
    try:
        with open_as(path, account) as handle:  # (a link in the image: as the account)
            data = handle.read(MAX_ACCOUNTS_FILE)
    except OSError:
        return []
    kept = []
    text = data.decode("utf-8", errors="replace")
    if len(data) == MAX_ACCOUNTS_FILE:  # (a larger file: its last, partial line dropped)
        text = text.rsplit("\n", 1)[0]
    for line in text.splitlines():
        fields = line.split(":")
        if (
            len(fields) < 3
            or not line.isprintable()
            or fields[0] == drop[0]
            or fields[2] == drop[1]
        ):
            continue
        kept.append(line)
    return kept


def wrap_with_files(argv: list[str], files: Mapping[int, str]) -> list[str]:
    """``argv`` run by ``/bin/sh`` with ``files`` (descriptor -> text) as here-documents,
    for bwrap's ``--ro-bind-data FD``: no file on disk to clean up."""
    token = secrets.token_hex(8)
    redirections, bodies = [], []
    for fd, text in files.items():
        delimiter = f"CORRAL_{fd}_{token}"
        redirections.append(f"{fd}<<'{delimiter}'")
        bodies.append(f"{text}{delimiter}\n")
    script = f'exec "$@" {" ".join(redirections)}\n{"".join(bodies)}'
    return ["/bin/sh", "-c", script, "corral-container", *argv]
