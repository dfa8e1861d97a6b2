"""``corral sbatch``: real batch scripts on a real server and agents, with ``srun`` inside."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster, wait_for

TWO_NODES = f"""#!/bin/bash -l
#SBATCH --job-name=twonode
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:H100:2
#SBATCH --output=out-%x-%j.log
#SBATCH -t 10:00
# a comment, then commands: #SBATCH lines below are not read
echo "batch on $SLURMD_NODENAME in $(pwd) with $SLURM_NTASKS tasks on $SLURM_JOB_NODELIST"
echo "args: $*"
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "master: $master"
export SET_IN_SCRIPT=yes
srun -l {sys.executable} -c 'import os; e = os.environ; print(e["SLURM_PROCID"], \
e["SLURM_LOCALID"], e["SLURM_NODEID"], e["SLURM_NTASKS"], e["RANK"], e["WORLD_SIZE"], \
e["CORRAL_NODE"], e["FROM_SUBMITTER"], e["SET_IN_SCRIPT"], e["SLURM_STEP_ID"])'
echo "first step: $?"
srun -n 1 sh -c 'echo "one task on $CORRAL_NODE"; exit 3'
echo "second step: $?"
#SBATCH --nodes=5
"""


def sbatch(
    cluster: LocalCluster, cwd: Path, *args: str, env: dict | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "corral", "sbatch", *args],
        env={**cluster.env, "CORRAL_SERVER": cluster.url, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and result.returncode:
        raise AssertionError(f"sbatch {args} failed: {result.stderr}{result.stdout}")
    return result


def ended(cluster: LocalCluster, job: int, timeout: float = 60) -> str:
    c = cluster.client()
    wait_for(lambda: c.get(job).state in ("succeeded", "failed", "cancelled"), timeout, "the job")
    return c.get(job).state


def test_a_two_node_script_runs_once_and_srun_starts_tasks_on_both_nodes(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(TWO_NODES)
    result = sbatch(cluster, work, "job.sh", "one", "two", env={"FROM_SUBMITTER": "hi"})
    assert result.stdout == "Submitted batch job 1\n", result.stderr
    assert ended(cluster, 1) == "succeeded"
    out = (work / "out-twonode-1.log").read_text()
    lines = out.splitlines()
    assert lines[0] == f"batch on node-a in {work} with 4 tasks on node-a,node-b", out
    assert "args: one two" in lines
    assert "master: node-a" in lines
    step = sorted(line for line in lines if line[:1].isdigit() and ": " in line)
    assert step == [
        "0: 0 0 0 4 0 4 node-a hi yes 0",
        "1: 1 1 0 4 1 4 node-a hi yes 0",
        "2: 2 0 1 4 2 4 node-b hi yes 0",
        "3: 3 1 1 4 3 4 node-b hi yes 0",
    ], out
    assert "first step: 0" in lines
    assert "one task on node-a" in lines
    assert "second step: 3" in lines
    job = cluster.client().get(1)
    assert job.name == "twonode" and job.manifest["time_limit"] == 600


def test_a_chain_of_dependencies_and_a_hold(cluster: LocalCluster, tmp_path: Path) -> None:
    def submit(*args: str) -> int:
        return int(sbatch(cluster, tmp_path, "--parsable", *args).stdout)

    fails = submit("--wrap", "exit 1")
    never = submit("-d", f"afterok:{fails}", "--wrap", "echo never")
    after = submit(f"--dependency=afternotok:{fails}", "-J", "after", "--wrap", "echo after")
    held = submit("-H", "--wrap", "echo held")
    assert ended(cluster, after) == "succeeded"
    c = cluster.client()
    assert ended(cluster, never) == "cancelled"
    assert c.get(never).reason.startswith("dependency never satisfied")
    assert c.get(fails).state == "failed" and c.get(held).reason == "held"
    cluster.cli("release", str(held))
    assert ended(cluster, held) == "succeeded"
    assert (tmp_path / f"slurm-{held}.out").read_text() == "held\n"
    assert not (tmp_path / f"slurm-{never}.out").exists()


def test_parsable_wrap_and_the_script_exit_code(cluster: LocalCluster, tmp_path: Path) -> None:
    result = sbatch(cluster, tmp_path, "--parsable", "--wrap", "echo wrapped; exit 4")
    assert result.stdout == "1\n"
    assert ended(cluster, 1) == "failed"
    assert cluster.client().get(1).exit_code == 4
    assert (tmp_path / "slurm-1.out").read_text() == "wrapped\n"


def test_bad_options_are_refused_and_nothing_is_submitted(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --exclusive\necho hi\n")
    refused = sbatch(cluster, tmp_path, "job.sh", check=False)
    assert refused.returncode == 1
    assert "--exclusive: not supported" in refused.stderr
    script.write_text("#!/bin/sh\n#SBATCH --frobnicate=3\necho hi\n")
    unknown = sbatch(cluster, tmp_path, "job.sh", check=False)
    assert "--frobnicate=3 (in an #SBATCH line): not an sbatch option" in unknown.stderr
    script.write_text("echo no shebang\n")
    plain = sbatch(cluster, tmp_path, "job.sh", check=False)
    assert "first line must start with #!" in plain.stderr
    assert cluster.client().list(all=True) == []


DDP_PROGRAM = """
import os
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
value = torch.tensor([float(dist.get_rank())])
dist.all_reduce(value)
line = (f"rank {dist.get_rank()} of {dist.get_world_size()} local {os.environ['LOCAL_RANK']}"
        f" sum {int(value.item())}\\n")
sys.stdout.write(line)  # one write: torchrun's workers share a pipe (and run with -u)
sys.stdout.flush()
dist.destroy_process_group()
"""

# PyTorch's multinode torchrun example (examples/distributed/ddp-tutorial-series/slurm/
# sbatch_run.sh), with 2 nodes of 2 processes instead of 4 of 1
TORCHRUN_TEMPLATE = """#!/bin/bash
#SBATCH --job-name=multinode-example
#SBATCH --nodes=2
#SBATCH --ntasks=2
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=1

nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
nodes_array=($nodes)
head_node=${nodes_array[0]}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)

echo Node IP: $head_node_ip
export LOGLEVEL=INFO

srun PYTHON -m torch.distributed.run \\
--nnodes 2 \\
--nproc_per_node 2 \\
--rdzv_id $RANDOM \\
--rdzv_backend c10d \\
--rdzv_endpoint $head_node_ip:PORT \\
ddp.py
"""

# the common hand-written template: srun starts every rank; the script finds the master
SRUN_TEMPLATE = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=2
#SBATCH --time=00:10:00
export MASTER_PORT=$(expr 10000 + $(echo -n $SLURM_JOBID | tail -c 4))
export WORLD_SIZE=$(($SLURM_NNODES * $SLURM_NTASKS_PER_NODE))
echo "WORLD_SIZE="$WORLD_SIZE
master_addr=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$master_addr
echo "MASTER_ADDR="$MASTER_ADDR
srun PYTHON ddp.py
"""


# the second template takes the first node's name for the master address, as on a real
# cluster, where node names resolve: here the nodes are named by loopback addresses
@pytest.mark.cluster_options(nodes=["127.0.0.1", "127.0.0.2"])
def test_published_ddp_templates_run_unchanged(cluster: LocalCluster, tmp_path: Path) -> None:
    from tests.e2e.cluster import free_port

    (tmp_path / "ddp.py").write_text(DDP_PROGRAM)
    torchrun = TORCHRUN_TEMPLATE.replace("PYTHON", sys.executable)
    (tmp_path / "torchrun.sh").write_text(torchrun.replace("PORT", str(free_port())))
    (tmp_path / "srun.sh").write_text(SRUN_TEMPLATE.replace("PYTHON", sys.executable))
    assert sbatch(cluster, tmp_path, "torchrun.sh").stdout == "Submitted batch job 1\n"
    assert sbatch(cluster, tmp_path, "srun.sh").stdout == "Submitted batch job 2\n"
    for job in (1, 2):
        state = ended(cluster, job, timeout=120)
        out = (tmp_path / f"slurm-{job}.out").read_text()
        assert state == "succeeded", out
        ranks = sorted(line for line in out.splitlines() if line.startswith("rank "))
        locals_ = [0, 1, 0, 1]
        assert ranks == [f"rank {r} of 4 local {locals_[r]} sum 6" for r in range(4)], out
    assert "Node IP: 127.0.0.1" in (tmp_path / "slurm-1.out").read_text()


def test_cancel_stops_the_script_and_its_steps_on_every_node(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    marker = f"corral-sbatch-test-{tmp_path.name}"
    sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {marker}"
    script = f"#!/bin/sh\n#SBATCH -N 2\nsrun {sleeper}\necho survived\n"
    (tmp_path / "job.sh").write_text(script)
    sbatch(cluster, tmp_path, "job.sh")
    c = cluster.client()

    def running() -> bool:
        steps = c.steps(1) if c.get(1).state == "running" else []
        return any(t.state == "running" for s in steps for t in s.tasks)

    wait_for(running, 30, "the srun step to run")
    cluster.cli("cancel", "1")
    assert ended(cluster, 1) == "cancelled"

    def gone() -> bool:
        found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
        return not found.stdout.strip()

    wait_for(gone, 30, "the step's processes to be gone")
    assert "survived" not in (tmp_path / "slurm-1.out").read_text()


def test_mpirun_in_a_batch_script_launches_through_srun(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    script = (
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
        "mpirun --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo "
        "--mca oob_tcp_if_include lo "
        "sh -c 'echo \"rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $CORRAL_NODE\"'\n"
        'echo "mpirun: $?"\n'
    )
    (tmp_path / "mpi.sh").write_text(script)
    sbatch(cluster, tmp_path, "mpi.sh")
    assert ended(cluster, 1) == "succeeded"
    lines = (tmp_path / "slurm-1.out").read_text().splitlines()
    nodes = ["node-a", "node-a", "node-b", "node-b"]
    assert sorted(line for line in lines if line.startswith("rank ")) == [
        f"rank {r} of 4 on {nodes[r]}" for r in range(4)
    ], lines
    assert "mpirun: 0" in lines
    assert len(cluster.client().steps(1)) == 1  # Open MPI's daemons: one srun step


def test_an_array_with_a_throttle_and_output_patterns(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    script = (
        "#!/bin/sh\n#SBATCH --array=1-5%2\n#SBATCH -J arr\n#SBATCH -o %x-%A_%3a.out\n"
        'echo "$SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT'
        ' job $SLURM_JOB_ID"\n'
        "sleep 1\n"
    )
    (tmp_path / "arr.sh").write_text(script)
    assert sbatch(cluster, tmp_path, "arr.sh").stdout == "Submitted batch job 1\n"
    c = cluster.client()
    for job in range(1, 6):
        assert ended(cluster, job) == "succeeded"
    for index in range(1, 6):  # element ids follow the indices here: job 1 is 1_1
        out = (tmp_path / f"arr-1_{index:03d}.out").read_text()
        assert out == f"1 {index} of 5 job {index}\n"
    spans = [(c.get(job).started_at, c.get(job).ended_at) for job in range(1, 6)]
    for start, _ in spans:  # never more than 2 running at once
        assert sum(1 for s, e in spans if s <= start < e) <= 2, spans
    listed = cluster.cli("jobs", "--all").stdout
    assert "1_[1-5%2]" in listed and "succeeded 5" in listed, listed
