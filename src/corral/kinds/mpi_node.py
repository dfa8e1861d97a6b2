"""What runs on the worker nodes of a ``kind: mpi`` job. Standard library only: it starts
once per node and once per rank, so it must start fast.

``python -m corral.kinds.mpi_node daemon LINE``
    The process of the job step that ``corral.kinds.mpi_rsh`` starts on a node: Open MPI's
    remote command ``LINE`` (``orted ...``), run as ssh would, by the account's login
    shell (``/bin/sh`` unless that is a csh), with Open MPI's shared-memory files in a
    directory of its own that is removed at the end. (Two Corral nodes on one machine would
    otherwise share the files' names, which hold the host name; and a killed job leaves
    none behind in ``/dev/shm``.)

``python -m corral.kinds.mpi_node rank [--all-gpus] -- COMMAND...``
    What ``mpirun`` starts for each rank: sets the rank's ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and ``NNODES`` from Open MPI's (or MPICH's)
    variables and narrows ``CUDA_VISIBLE_DEVICES`` to the rank's share of its node's GPUs
    (:func:`rank_env`), then replaces itself with ``COMMAND``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence

SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh")  # run as ssh would run them
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SHM_ENV = "OMPI_MCA_btl_vader_backing_directory"
# (rank, size, local rank, local size): Open MPI's names, then MPICH Hydra's
RANK_VARIABLES = (
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)


def rank_env(environ: Mapping[str, str], all_gpus: bool = False) -> dict[str, str]:
    """What a rank's environment changes: the torchrun-style variables from the MPI
    launcher's, and its GPUs. The node's GPUs (``CUDA_VISIBLE_DEVICES``: every GPU the job
    holds there) are split evenly among the node's ranks in local rank order, as Corral
    splits them among tasks; with ``all_gpus``, or when they do not split evenly, every
    rank sees them all. Nothing when no MPI launcher's variables are set."""
    for names in RANK_VARIABLES:
        values = [environ.get(name, "") for name in names]
        if all(value.isdigit() for value in values):
            break
    else:
        return {}
    rank, size, local, local_size = (int(value) for value in values)
    env = {
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(local_size),
    }
    if local_size and size % local_size == 0:
        env["NNODES"] = str(size // local_size)
    devices = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    if devices and not all_gpus and local_size and len(devices) % local_size == 0:
        share = len(devices) // local_size
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices[local * share : (local + 1) * share])
    return env


def login_shell(shell: str | None) -> str:
    """The shell that runs the remote command line: the account's login shell when it is
    one Open MPI writes for (it writes csh syntax for a csh user), else ``/bin/sh``."""
    if shell and os.path.basename(shell) in SHELLS and os.access(shell, os.X_OK):
        return shell
    return "/bin/sh"


def run_daemon(line: str) -> int:
    """Run Open MPI's remote command ``line``; its exit code (128+N after signal N)."""
    import pwd
    import shutil
    import subprocess
    import tempfile

    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = None
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
    private = tempfile.mkdtemp(prefix="corral-mpi-", dir=shm)
    env = dict(os.environ)
    env.setdefault(SHM_ENV, private)
    try:
        child = subprocess.Popen([login_shell(shell), "-c", line], env=env)

        def forward(signum: int, _frame: object) -> None:
            child.send_signal(signum)

        for sig in FORWARDED:
            signal.signal(sig, forward)
        code = child.wait()
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return 128 - code if code < 0 else code


def exec_rank(argv: Sequence[str]) -> int:
    """Replace this process with the rank's command, in the rank's environment."""
    args = list(argv)
    all_gpus = "--all-gpus" in args[: args.index("--")] if "--" in args else False
    command = args[args.index("--") + 1 :] if "--" in args else args
    if not command:
        print("corral mpi: no command for the rank", file=sys.stderr)
        return 2
    os.environ.update(rank_env(os.environ, all_gpus))
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"corral mpi: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return 126 if isinstance(exc, PermissionError) else 127
    return 0  # not reached


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "daemon":
        return run_daemon(args[1])
    if args and args[0] == "rank":
        return exec_rank(args[1:])
    print(
        "usage: python -m corral.kinds.mpi_node daemon LINE | rank [--all-gpus] -- COMMAND...",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
