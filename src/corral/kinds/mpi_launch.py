"""The launcher task of a ``kind: mpi`` job: ``mpirun`` (Open MPI) over the job's worker
nodes, whose remote daemons start as job steps (``corral.kinds.mpi_rsh``), never over ssh.

``python -m corral.kinds.mpi_launch -- COMMAND...`` reads what ``MpiKind.launch`` put in
its environment (``CORRAL_MPI_*``: :class:`Plan`), writes a hostfile in a private
directory, starts the step broker there (``corral.kinds.mpi_steps``: it starts the
daemons' steps for the rsh agents), runs::

    mpirun --hostfile FILE -np RANKS [mpi.mpirun_args] \\
        PYTHON -m corral.kinds.mpi_node rank -- COMMAND...

and exits with mpirun's exit code (SIGTERM, SIGINT and SIGHUP are passed on to it).

Open MPI is told, through ``OMPI_MCA_*`` variables (which its command line overrides), to
start its daemons with the rsh agent, one by one from here (no tree spawn) and attached (no
``--daemonize``: the step lasts as long as the daemon). The hostfile names each node by an
alias no host answers to (:func:`alias`), so that mpirun never takes one for the machine it
runs on and starts ranks inside the launcher task: every rank starts on its node, in the
job's containment there. (Only the broker needs more than the standard library: the
pure helpers here are imported by the kind.)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from corral.kinds.mpi_rsh import ALIASES_ENV, BROKER_ENV

NODES_ENV = "CORRAL_MPI_NODES"  # JSON list: the worker nodes in node-rank order
RANKS_ENV = "CORRAL_MPI_RANKS"
MPIRUN_ENV = "CORRAL_MPI_MPIRUN"
ARGS_ENV = "CORRAL_MPI_ARGS"  # JSON list: mpi.mpirun_args
TCP_ENV = "CORRAL_MPI_TCP"  # comma-separated interfaces or CIDRs; empty: Open MPI's choice
BIND_ENV = "CORRAL_MPI_BIND_GPUS"  # 1: each rank sees its share of its node's GPUs
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
VERSION = re.compile(r"\(Open MPI\)\s+(\d+)\.(\d+)")


@dataclass(frozen=True)
class Plan:
    """What the kind decided for the launcher (from the manifest and the allocation)."""

    nodes: tuple[str, ...]
    ranks: int
    mpirun: str = "mpirun"
    args: tuple[str, ...] = ()
    tcp: tuple[str, ...] = ()
    bind_gpus: bool = True

    @property
    def per_node(self) -> int:
        return self.ranks // len(self.nodes)

    def to_env(self) -> dict[str, str]:
        return {
            NODES_ENV: json.dumps(list(self.nodes)),
            RANKS_ENV: str(self.ranks),
            MPIRUN_ENV: self.mpirun,
            ARGS_ENV: json.dumps(list(self.args)),
            TCP_ENV: ",".join(self.tcp),
            BIND_ENV: "1" if self.bind_gpus else "0",
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Plan:
        """The plan in ``environ``; ``ValueError`` when it is missing or malformed."""
        try:
            nodes = json.loads(environ[NODES_ENV])
            ranks = int(environ[RANKS_ENV])
            args = json.loads(environ.get(ARGS_ENV) or "[]")
        except (KeyError, ValueError) as exc:
            raise ValueError(
                f"no launch plan in the environment ({exc}): not a kind mpi task"
            ) from None
        if (
            not isinstance(nodes, list)
            or not isinstance(args, list)
            or not nodes
            or not all(isinstance(n, str) for n in nodes)
            or ranks < 1
            or ranks % len(nodes)
        ):
            raise ValueError(f"bad launch plan: {ranks} ranks on nodes {nodes}")
        tcp = tuple(t for t in (environ.get(TCP_ENV) or "").split(",") if t)
        return cls(
            tuple(nodes),
            ranks,
            environ.get(MPIRUN_ENV) or "mpirun",
            tuple(str(a) for a in args),
            tcp,
            environ.get(BIND_ENV, "1") != "0",
        )


def alias(index: int, node: str) -> str:
    """The hostfile name of the job's ``index``-th worker node: the node's name made a
    plain host label (no dots: Open MPI cuts names at the first dot) with ``-mpiN`` added,
    which no machine answers to."""
    label = re.sub(r"[^A-Za-z0-9-]+", "-", node).strip("-")[:48] or "node"
    return f"{label}-mpi{index}"


def hostfile(aliases: Sequence[str], slots: int) -> str:
    return "".join(f"{name} slots={slots}\n" for name in aliases)


def launch_env(
    environ: Mapping[str, str],
    plan: Plan,
    agent: str,
    aliases: Mapping[str, str],
    root: bool,
) -> dict[str, str]:
    """mpirun's environment: the task's, with what makes Open MPI start its daemons as
    job steps (always), and defaults the job's environment or ``mpirun_args`` may change:
    no CPU binding (Corral does not pin tasks to cores, and several Corral nodes may share a
    machine), the TCP interfaces, and leave to run as root where the job runs as root."""
    env = dict(environ)
    env.update(
        {
            "OMPI_MCA_plm_rsh_agent": agent,
            "OMPI_MCA_plm_rsh_no_tree_spawn": "1",  # every daemon from here
            "OMPI_MCA_orte_leave_session_attached": "1",  # no --daemonize
            "OMPI_MCA_if_base_do_not_resolve": "1",  # no DNS look-ups of the aliases
            ALIASES_ENV: json.dumps(dict(aliases)),
        }
    )
    defaults: dict[str, str] = {}
    if not _mentioned(plan.args, "bind-to", "binding_policy"):
        defaults["OMPI_MCA_hwloc_base_binding_policy"] = "none"
    if plan.tcp:
        for family in ("oob_tcp_if_", "btl_tcp_if_"):  # include and exclude exclude each other
            if not _mentioned(plan.args, family) and not _mentioned(env, f"OMPI_MCA_{family}"):
                defaults[f"OMPI_MCA_{family}include"] = ",".join(plan.tcp)
    if root:
        defaults.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for key, value in defaults.items():
        env.setdefault(key, value)
    return env


def _mentioned(args: Iterable[str], *words: str) -> bool:
    return any(word in arg for arg in args for word in words)


def rsh_agent(python: str) -> str:
    """``plm_rsh_agent``: this interpreter running ``corral.kinds.mpi_rsh``. mpirun passes
    it on to every daemon, which checks that it exists on its node (and would stop if
    not), so it names no file of the launcher's own. Open MPI splits it at spaces and
    colons: ``ValueError`` for an interpreter path holding one."""
    if any(c.isspace() or c == ":" for c in python):
        raise ValueError(
            f"the interpreter's path {python!r} holds a space or a colon, which Open MPI's "
            "plm_rsh_agent cannot hold; install Corral under another path"
        )
    return f"{python} -m corral.kinds.mpi_rsh"


def mpirun_argv(plan: Plan, hostfile_path: str, python: str, command: Sequence[str]) -> list[str]:
    """mpirun as the job's ``mpi.mpirun`` names it (an absolute path tells Open MPI to find
    its daemon under the same prefix on every node; a bare name, on each node's PATH)."""
    rank = [python, "-m", "corral.kinds.mpi_node", "rank"]
    if not plan.bind_gpus:
        rank.append("--all-gpus")
    return [
        plan.mpirun,
        "--hostfile",
        hostfile_path,
        "-np",
        str(plan.ranks),
        *plan.args,
        *rank,
        "--",
        *command,
    ]


def version_problem(mpirun: str, output: str) -> str | None:
    """Why ``mpirun --version``'s ``output`` is not an mpirun this launcher drives."""
    found = VERSION.search(output)
    first = output.strip().splitlines()[0] if output.strip() else "no output"
    if found is None:
        return (
            f"{mpirun} is not Open MPI's mpirun ({first}); kind mpi drives Open MPI 3 or 4 "
            "(set mpi.mpirun to Open MPI's, or see the kind's docs for MPICH)"
        )
    if int(found.group(1)) >= 5:
        return (
            f"{mpirun} is Open MPI {found.group(1)}.{found.group(2)} (PRRTE), which kind mpi "
            "does not drive yet; use Open MPI 3 or 4 (set mpi.mpirun)"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    import shutil
    import tempfile

    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] == ["--"]:
        command = command[1:]
    node = os.environ.get("CORRAL_NODE", "this node")
    try:
        if not command:
            raise ValueError("no command to run")
        plan = Plan.from_env(os.environ)
    except ValueError as exc:
        print(f"corral mpi: {exc}", file=sys.stderr)
        return 2
    if shutil.which(plan.mpirun) is None:
        print(
            f"corral mpi: {plan.mpirun} not found on {node} (PATH={os.environ.get('PATH', '')});"
            " install Open MPI there (Debian: openmpi-bin) or set mpi.mpirun",
            file=sys.stderr,
        )
        return 127
    problem = _check_version(plan.mpirun)
    if problem:
        print(f"corral mpi: {problem}", file=sys.stderr)
        return 2
    private = tempfile.mkdtemp(prefix="corral-mpi-")  # 0700: the job's user only
    try:
        return _launch(plan, command, private)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _launch(plan: Plan, command: list[str], private: str) -> int:
    """Write the hostfile in ``private``, start the step broker there, run mpirun."""
    from corral.client import Client
    from corral.client.config import resolve_job
    from corral.errors import CorralError
    from corral.kinds.mpi_steps import StepBroker

    try:
        job = resolve_job()
        agent = rsh_agent(sys.executable)
    except (CorralError, ValueError) as exc:
        print(f"corral mpi: {exc}", file=sys.stderr)
        return 2
    aliases = {alias(i, n): n for i, n in enumerate(plan.nodes)}
    hosts = os.path.join(private, "hostfile")
    with open(hosts, "w") as f:
        f.write(hostfile(list(aliases), plan.per_node))
    env = launch_env(os.environ, plan, agent, aliases, root=os.geteuid() == 0)
    args = mpirun_argv(plan, hosts, sys.executable, command)
    print(
        f"corral mpi: {plan.ranks} ranks, {plan.per_node} per node on "
        f"{', '.join(plan.nodes)}: {shlex.join(args)}",
        file=sys.stderr,
        flush=True,
    )
    with Client(job.server, job.token) as client:
        broker = StepBroker(client, job.job_id, os.path.join(private, "broker"))
        broker.start()
        env[BROKER_ENV] = broker.path
        try:
            return _run(args, env)
        finally:
            broker.close()


def _check_version(mpirun: str) -> str | None:
    try:
        found = subprocess.run(
            [mpirun, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {mpirun} --version: {exc}"
    return version_problem(mpirun, found.stdout + found.stderr)


def _run(args: list[str], env: dict[str, str]) -> int:
    """Run mpirun, passing signals on; its exit code (128+N after signal N)."""
    child = subprocess.Popen(args, env=env)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
