"""Every trace reader on its hand-made sample (tests/sim/traces/data), the ``FORMAT:PATH``
dispatcher, the ``limit`` option, and the one-line errors for bad traces and options."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from corral.core.resources import model_matches
from corral.errors import ValidationError
from corral.sim.traces import FORMATS, parse_trace_spec, read_trace
from corral.sim.workload import SimJob, Workload

DATA = Path(__file__).parent / "data"
MIB = 1024**2
GIB = 1024**3
GB = 1000**3


def load(spec: str, seed: int = 0) -> Workload:
    """``read_trace`` with the sample folder as the base of relative paths."""
    name, _, rest = spec.partition(":")
    return read_trace(f"{name}:{DATA / rest}", seed=seed)


def row(job: SimJob) -> tuple[object, ...]:
    """What a test compares: name, submit, duration, queue, nodes, GPUs per node, model."""
    spec = job.spec
    return (
        job.name,
        job.submit_time,
        job.duration,
        spec.queue,
        spec.nodes,
        str(spec.gpus),
        spec.gpu_model,
    )


def rows(workload: Workload) -> list[tuple[object, ...]]:
    return [row(j) for j in workload.jobs]


# -- openb ----------------------------------------------------------------------------

OPENB_JOBS = [
    ("pod-00", 0.0, 600.0, "default", 1, "0", None),  # CPU-only; ties at 0 go by name
    ("pod-12", 0.0, 295.0, "default", 1, "0", None),  # runs from scheduled_time
    ("pod-01", 10.0, 998.0, "default", 1, "0.46", None),  # a share of one GPU
    ("pod-02", 20.0, 3600.0, "default", 1, "1", None),
    ("pod-03", 30.0, 9990.0, "default", 1, "8", None),
    ("pod-04", 40.0, 1000.0, "default", 1, "2", "T4"),
    ("pod-05", 50.0, 300.0, "default", 1, "0.5", "V100M*"),
    ("pod-06", 60.0, 900.0, "default", 1, "1", "[PV]*[06]"),
    ("pod-07", 70.0, 100.0, "default", 1, "0.25", "[AT]*"),  # never scheduled
    ("pod-09", 90.0, 90.0, "default", 1, "4", "[GPTV]*"),
    ("pod-10", 100.0, 0.0, "default", 1, "1", None),
    ("pod-11", 110.0, 100.0, "default", 1, "2", None),  # 2 x 500 milli: whole GPUs
]


def test_openb_jobs() -> None:
    workload = load("openb:openb/pods.csv")
    assert rows(workload) == OPENB_JOBS
    pod = {j.name: j.spec for j in workload.jobs}
    assert (pod["pod-01"].cpus, pod["pod-01"].memory) == (6.0, 12288 * MIB)
    assert (pod["pod-00"].cpus, pod["pod-00"].memory) == (8.0, 30517 * MIB)
    assert all(j.spec.command == f"trace:{j.name}" for j in workload.jobs)
    assert workload.source.startswith("openb pods.csv: 12 jobs from 14 pods, 2 skipped")
    assert "no creation time: 1" in workload.source
    assert "no end time: 1" in workload.source
    assert "1 multi-GPU shares given whole GPUs" in workload.source


def test_openb_gpu_spec_globs_match_exactly_the_listed_models() -> None:
    """Each ``gpu_spec`` list becomes a glob that the scheduler's matcher reads as the list."""
    workload = load("openb:openb/pods.csv")
    known = {"A10", "G2", "P100", "T4", "V100M16", "V100M32"}  # node list + specs
    expected = {
        "pod-04": {"T4"},
        "pod-05": {"V100M16", "V100M32"},
        "pod-06": {"P100", "V100M16"},
        "pod-07": {"A10", "T4"},
        "pod-09": {"G2", "P100", "T4", "V100M16", "V100M32"},
    }
    for job in workload.jobs:
        if job.name in expected:
            matched = {m for m in known if model_matches(m, job.spec.gpu_model)}
            assert matched == expected[job.name], job.name


def test_openb_cluster_from_the_node_list_next_to_the_pods() -> None:
    nodes = load("openb:openb/pods.csv").nodes
    assert nodes is not None
    assert [(n.name, n.gpu_count, sorted(n.models), n.cpus, n.memory) for n in nodes] == [
        ("node-0", 8, ["G2"], 96.0, 393216 * MIB),
        ("node-1", 2, ["T4"], 104.0, 524288 * MIB),
        ("node-2", 2, ["P100"], 64.0, 262144 * MIB),
        ("node-3", 4, ["V100M16"], 32.0, 131072 * MIB),
        ("node-4", 8, ["V100M32"], 96.0, 786432 * MIB),
        ("node-5", 0, [], 32.0, 262144 * MIB),
    ]
    assert [d.index for d in nodes[0].devices] == list(range(8))
    assert nodes[1].devices[0].memory == 16 * GIB  # a known model's memory
    assert nodes[0].devices[0].memory == 0  # G2: not known


def test_openb_node_list_option() -> None:
    workload = load(f"openb:openb/pods.csv?nodes={DATA / 'openb/nodes_small.csv'}")
    assert workload.nodes is not None
    assert [(n.name, n.gpu_count, n.cpus) for n in workload.nodes] == [
        ("small-0", 1, 16.0),
        ("small-1", 0, 8.0),
    ]
    assert "cluster nodes_small.csv: 2 nodes, 1 GPUs (A10)" in workload.source
    assert load("openb:openb/pods.csv?nodes=none").nodes is None


def test_openb_untimed_pod_list_is_the_fgd_packing_order() -> None:
    """No time columns: sorted by name, shuffled with the seed, one a second, no departures."""
    names = ["pod-a", "pod-b", "pod-c", "pod-d", "pod-e"]
    for seed in (0, 42, 7):
        workload = load("openb:openb/pods_untimed.csv", seed=seed)
        order = list(names)
        random.Random(seed).shuffle(order)
        assert [j.name for j in workload.jobs] == order
        assert [j.submit_time for j in workload.jobs] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert {j.duration for j in workload.jobs} == {1e9}
    gpus = {j.name: str(j.spec.gpus) for j in workload.jobs}
    assert gpus == {"pod-a": "0.3", "pod-b": "8", "pod-c": "0.7", "pod-d": "0", "pod-e": "1"}


def test_openb_shuffle_on_a_timed_list_and_its_duration() -> None:
    workload = load("openb:openb/pods.csv?arrival=shuffle&duration=3600", seed=1)
    assert len(workload.jobs) == 14  # times unused: nothing skipped
    assert {j.duration for j in workload.jobs} == {3600.0}
    assert "arrival=shuffle" in workload.source


# -- philly ---------------------------------------------------------------------------


def test_philly_jobs() -> None:
    workload = load("philly:philly/jobs.csv")
    assert rows(workload) == [
        ("j1", 0.0, 3600.0, "vc-a", 1, "1", None),
        ("j8", 0.0, 10.0, "vc-a", 1, "0.5", None),
        ("j3", 30.0, 7200.0, "vc-a", 2, "8", None),  # 16 GPUs: 2 x 8
        ("j2", 60.0, 60.0, "vc-b", 1, "0", None),  # CPU-only
        ("j4", 100.0, 100.0, "default", 2, "6", None),  # 12 GPUs: 2 x 6; no vc
        ("j5", 120.0, 50.0, "vc-b", 2, "5", None),  # 9 GPUs: 2 x 5, rounded up
        ("j9", 200.0, 20.0, "vc-c", 1, "4", None),
        ("j1-2", 300.0, 30.0, "vc-a", 1, "2", None),  # a repeated id
    ]
    assert workload.nodes is None
    assert "2 skipped (no run time: 1, no submit time: 1)" in workload.source
    assert "1 GPU requests rounded up" in workload.source


def test_philly_datetimes_and_column_aliases() -> None:
    workload = load("philly:philly/jobs_datetime.csv")
    assert rows(workload) == [
        ("c", 0.0, 30.0, "u1", 3, "8", None),
        ("a", 60.0, 600.0, "u1", 1, "8", None),
        ("b", 390.0, 60.0, "u2", 1, "2", None),
    ]
    assert [j.spec.cpus for j in workload.jobs] == [32.0, 32.0, None]  # 96 CPUs / 3 nodes


def test_philly_options() -> None:
    assert {j.spec.queue for j in load("philly:philly/jobs.csv?queue=none").jobs} == {"default"}
    by_user = {j.name: j.spec.queue for j in load("philly:philly/jobs.csv?queue=user").jobs}
    assert by_user["j4"] == "carol"
    four = load("philly:philly/jobs.csv?gpus_per_node=4")
    assert {j.name: (j.spec.nodes, str(j.spec.gpus)) for j in four.jobs}["j3"] == (4, "4")


# -- gavel ----------------------------------------------------------------------------


def test_gavel_jobs() -> None:
    workload = load("gavel:gavel/jobs.trace")
    assert rows(workload) == [
        ("job-0", 0.0, 100.0, "default", 1, "1", None),  # 1000 steps / 10 per s
        ("job-1", 30.0, 1000.0, "default", 1, "1", None),
        ("job-2", 60.5, 200.0, "default", 1, "2", None),
        ("job-3", 90.0, 1000.0, "default", 1, "4", None),
        ("job-4", 120.0, 500.0, "default", 2, "8", None),  # 16: 12 steps/s at 4, x4
        ("job-5", 150.0, 25.0, "default", 1, "2", None),  # A3C at 2 from 1: 4 steps/s
        ("job-7", 210.0, 7.8125, "default", 1, "8", None),  # from 16 steps/s at 2, x4
    ]
    assert "1 skipped (no v100 throughput: 1)" in workload.source  # CycleGAN
    assert "3 v100 throughputs extrapolated" in workload.source


def test_gavel_gpu_type_and_missing_skip() -> None:
    workload = load("gavel:gavel/jobs.trace?gpu=k80&missing=skip")
    assert rows(workload) == [
        ("job-0", 0.0, 400.0, "default", 1, "1", None),
        ("job-2", 60.5, 800.0, "default", 1, "2", None),
        ("job-3", 90.0, 4000.0, "default", 1, "4", None),
    ]
    assert "cannot run on k80: 1" in workload.source  # LM's k80 throughput is 0
    assert "no k80 throughput: 4" in workload.source


def test_gavel_nine_field_layout_and_throughputs_option() -> None:
    table = DATA / "gavel/simulation_throughputs.json"
    workload = load(f"gavel:gavel/jobs9.trace?throughputs={table}")
    assert rows(workload) == [
        ("job-1", 0.0, 100.0, "default", 1, "1", None),
        ("job-0", 5.0, 200.0, "default", 1, "1", None),
    ]


# -- pai2020 --------------------------------------------------------------------------

PAI_JOBS = [
    ("jobA", 0.0, 1000.0, "u1", 1, "2", "V100"),  # 2 x 100% + a CPU-only ps task
    ("jobF", 0.0, 600.0, "u3", 1, "0", None),
    ("jobC", 50.0, 4000.0, "u1", 2, "8", "MISC"),  # 16 instances: 2 x 8
    ("jobB", 100.0, 300.0, "u2", 1, "0.5", "T4"),
    ("jobG", 500.0, 300.0, "u1", 1, "2", "P100"),  # 3 x 50% = 1.5, rounded up
    ("jobH", 600.0, 1000.0, "u2", 1, "2", "[PT]*"),  # a T4 task and a P100 task
]


def test_pai2020_jobs() -> None:
    workload = load("pai2020:pai2020/pai_job_table.csv")
    assert rows(workload) == PAI_JOBS
    spec = {j.name: j.spec for j in workload.jobs}
    assert (spec["jobA"].cpus, spec["jobA"].memory) == (14.0, 70 * GB)  # 2x6 + 2 cores
    assert (spec["jobC"].cpus, spec["jobC"].memory) == (32.0, 160 * GB)  # per node
    assert "2 skipped (no end time: 1, no tasks: 1)" in workload.source
    assert "1 GPU requests rounded up" in workload.source


def test_pai2020_machines_are_the_cluster() -> None:
    nodes = load("pai2020:pai2020/pai_job_table.csv").nodes
    assert nodes is not None
    assert [(n.name, n.gpu_count, sorted(n.models), n.cpus, n.memory) for n in nodes] == [
        ("m1", 8, ["V100"], 96.0, 512 * GB),
        ("m2", 2, ["T4"], 96.0, 512 * GB),
        ("m3", 0, [], 96.0, 512 * GB),
        ("m4", 8, ["V100M32"], 96.0, 384 * GB),
        ("m5", 2, ["P100"], 64.0, 512 * GB),
        ("m6", 8, ["MISC"], 96.0, 512 * GB),
    ]
    assert load("pai2020:pai2020/pai_job_table.csv?machines=none").nodes is None


def test_pai2020_options() -> None:
    tasks = load("pai2020:pai2020/pai_job_table.csv?duration=tasks")
    assert {j.name: j.duration for j in tasks.jobs} == {
        "jobA": 990.0,
        "jobF": 600.0,
        "jobC": 3940.0,
        "jobB": 240.0,
        "jobG": 300.0,
        "jobH": 980.0,
    }
    kept = load("pai2020:pai2020/pai_job_table.csv?states=Failed&queue=none")
    assert rows(kept) == [("jobC", 0.0, 4000.0, "default", 2, "8", "MISC")]
    table = DATA / "pai2020/pai_task_table.csv"
    assert len(load(f"pai2020:pai2020/pai_job_table.csv?tasks={table}").jobs) == 6


# -- helios ---------------------------------------------------------------------------


def test_helios_jobs() -> None:
    workload = load("helios:helios/cluster_log.csv")
    assert rows(workload) == [
        ("h6", 0.0, 30.0, "vcB", 1, "1", None),
        ("h1", 60.0, 3600.0, "vcA", 1, "8", None),
        ("h2", 120.0, 60.0, "vcB", 1, "0", None),
        ("h3", 180.0, 7200.0, "vcA", 2, "8", None),  # 16 GPUs on node_num 2
        ("h4", 240.0, 100.0, "vcC", 2, "2", None),  # 3 GPUs on 2 nodes: 2 x 2
        ("h7", 360.0, 300.0, "vcD", 4, "8", None),  # no node_num: 32 -> 4 x 8
    ]
    assert [j.spec.cpus for j in workload.jobs] == [6.0, 48.0, 4.0, 48.0, 3.0, None]
    assert "2 skipped (never started: 1, no end time: 1)" in workload.source


def test_helios_states_and_queue_options() -> None:
    workload = load("helios:helios/cluster_log.csv?states=COMPLETED&queue=user")
    assert [(j.name, j.spec.queue) for j in workload.jobs] == [
        ("h6", "u2"),
        ("h1", "u1"),
        ("h2", "u2"),
        ("h4", "u3"),
        ("h7", "u4"),
    ]
    assert "3 skipped (state not kept: 3)" in workload.source


def test_helios_epoch_seconds_and_duration_column(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    log.write_text(
        "job_id,vc,gpu_num,node_num,submit_time,duration\n"
        "x,vc1,2,1,1600000100,50\n"
        "y,vc1,8,1,1600000000,\n"
        "z,vc2,4,1,1600000000,70\n"
    )
    workload = read_trace(f"helios:{log}")
    assert rows(workload) == [
        ("z", 0.0, 70.0, "vc2", 1, "4", None),
        ("x", 100.0, 50.0, "vc1", 1, "2", None),
    ]


# -- every format ---------------------------------------------------------------------

SAMPLES = {
    "openb": ("openb:openb/pods.csv", 12),
    "philly": ("philly:philly/jobs.csv", 8),
    "gavel": ("gavel:gavel/jobs.trace", 7),
    "pai2020": ("pai2020:pai2020/pai_job_table.csv", 6),
    "helios": ("helios:helios/cluster_log.csv", 6),
}


def test_every_format_has_a_sample() -> None:
    assert set(SAMPLES) == set(FORMATS)


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_sample_is_sorted_relative_and_deterministic(fmt: str) -> None:
    spec, count = SAMPLES[fmt]
    workload = load(spec)
    jobs = workload.jobs
    assert len(jobs) == count
    assert jobs[0].submit_time == 0.0
    assert list(jobs) == sorted(jobs, key=lambda j: (j.submit_time, j.name))
    assert len({j.name for j in jobs}) == len(jobs)
    assert all(j.spec.name == j.name and j.duration >= 0 for j in jobs)
    assert workload.source.startswith(f"{fmt} ")
    assert load(spec) == workload


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_limit_keeps_the_first_jobs_by_submit_time(fmt: str) -> None:
    spec, _ = SAMPLES[fmt]
    full = load(spec)
    limited = load(f"{spec}?limit=3" if "?" not in spec else f"{spec}&limit=3")
    assert limited.jobs == full.jobs[:3]
    assert limited.nodes == full.nodes
    assert limited.source.endswith("; first 3 jobs kept (limit=3)")
    assert load(f"{spec}?limit=1000").jobs == full.jobs


def test_parse_trace_spec() -> None:
    parsed = parse_trace_spec("openb:/data/pods.csv?nodes=/data/nodes.csv&limit=5")
    assert parsed.format.name == "openb"
    assert parsed.path == Path("/data/pods.csv")
    assert dict(parsed.options) == {"nodes": "/data/nodes.csv", "limit": "5"}
    assert parse_trace_spec("PHILLY:jobs.csv").format.name == "philly"


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            "philly:/nonexistent/jobs.csv",
            "philly trace: file not found: /nonexistent/jobs.csv",
            id="missing-file",
        ),
        pytest.param(
            "slurm:jobs.csv",
            "trace 'slurm:jobs.csv': unknown format 'slurm'; "
            "expected one of gavel, helios, openb, pai2020, philly",
            id="unknown-format",
        ),
        pytest.param("jobs.csv", "trace 'jobs.csv': expected FORMAT:PATH", id="no-format"),
        pytest.param("philly:", "trace 'philly:': expected FORMAT:PATH", id="no-path"),
        pytest.param(
            "philly:jobs.csv?nodes=x.csv",
            "philly trace: unknown option 'nodes'; expected one of gpus_per_node, limit, queue",
            id="unknown-option",
        ),
        pytest.param(
            "philly:jobs.csv?limit=0",
            "philly trace: option limit: expected a whole number >= 1, got '0'",
            id="bad-limit",
        ),
        pytest.param(
            "philly:jobs.csv?limit",
            "philly trace: option 'limit': expected key=value",
            id="no-value",
        ),
        pytest.param(
            "philly:jobs.csv?limit=1&limit=2",
            "philly trace: option 'limit' is given twice",
            id="repeated-option",
        ),
    ],
)
def test_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        read_trace(spec)
    assert info.value.message.startswith(message)
    assert "\n" not in info.value.message


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gavel:gavel/jobs.trace?gpu=h100", "gavel trace: option gpu: expected k80 or v100"),
        ("gavel:gavel/jobs.trace?missing=guess", "option missing: expected extrapolate or skip"),
        ("openb:openb/pods.csv?arrival=later", "option arrival: expected trace or shuffle"),
        ("openb:openb/pods.csv?duration=-1", "option duration: expected a number of seconds"),
        ("philly:philly/jobs.csv?gpus_per_node=x", "option gpus_per_node: expected a whole"),
        ("pai2020:pai2020/pai_job_table.csv?duration=wall", "option duration: expected job or"),
        ("pai2020:pai2020/pai_job_table.csv?queue=vc", "option queue: expected user or none"),
    ],
)
def test_bad_option_values(spec: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        load(spec)
    assert message in info.value.message


def test_missing_companion_files() -> None:
    with pytest.raises(ValidationError, match="openb node list: file not found: /nope.csv"):
        load("openb:openb/pods.csv?nodes=/nope.csv")
    with pytest.raises(ValidationError, match="gavel throughput table: file not found"):
        load("gavel:gavel/jobs.trace?throughputs=/nope.json")
    with pytest.raises(ValidationError, match="pai2020 task table: file not found"):
        load("pai2020:pai2020/pai_job_table.csv?tasks=/nope.csv")


def test_gavel_without_a_throughput_table(tmp_path: Path) -> None:
    trace = tmp_path / "a.trace"
    trace.write_text("A3C\tcmd\t-n\t1\t100\t0\t1\n")
    with pytest.raises(ValidationError, match="no throughput table: expected simulation_thr"):
        read_trace(f"gavel:{trace}")


@pytest.mark.parametrize(
    ("fmt", "name", "text", "message"),
    [
        pytest.param(
            "philly",
            "jobs.csv",
            "timestamp,duration,num_gpus\n0,10,1\n5,abc,1\n",
            "jobs.csv:3: duration: expected a number >= 0, got 'abc'",
            id="philly-not-a-number",
        ),
        pytest.param(
            "philly",
            "jobs.csv",
            "timestamp,duration,num_gpus\n0,10,1\n\n5,3\n",
            "jobs.csv:4: expected 3 fields (timestamp,duration,num_gpus), got 2",
            id="philly-short-row",
        ),
        pytest.param(
            "philly",
            "jobs.csv",
            "timestamp,duration,num_gpus\n0,10,2.5\n",
            "jobs.csv:2: num_gpus: expected a whole number of GPUs, or a fraction below one",
            id="philly-fraction-above-one",
        ),
        pytest.param(
            "philly",
            "jobs.csv",
            "timestamp,duration,num_gpus\nyesterday,10,1\n",
            "jobs.csv:2: timestamp: expected seconds or a date-time",
            id="philly-bad-time",
        ),
        pytest.param(
            "philly",
            "jobs.csv",
            "timestamp,duration\n0,10\n",
            "jobs.csv:1: header has no 'num_gpus' column (or num_gpu, gpus, gpu_num, gpu)",
            id="philly-missing-column",
        ),
        pytest.param(
            "philly",
            "jobs.csv",
            "",
            "jobs.csv: empty file: expected a header row",
            id="philly-empty",
        ),
        pytest.param(
            "openb",
            "pods.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,1500\n",
            "pods.csv:2: gpu_milli: expected 1..1000 (thousandths of a GPU)",
            id="openb-milli-above-1000",
        ),
        pytest.param(
            "openb",
            "pods.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,-1,1000\n",
            "pods.csv:2: num_gpu: expected a whole number >= 0, got '-1'",
            id="openb-negative-gpus",
        ),
        pytest.param(
            "gavel",
            "x.trace",
            "A3C\tcmd\t-n\t1\t100\t0\n",
            "x.trace:1: expected 7 fields (job_type,command,num_steps_arg,",
            id="gavel-short-line",
        ),
        pytest.param(
            "gavel",
            "x.trace",
            "A3C\tcmd\t-n\t1\t100\t0\t0\n",
            "x.trace:1: scale_factor: expected a whole number >= 1, got '0'",
            id="gavel-zero-scale",
        ),
        pytest.param(
            "helios",
            "log.csv",
            "job_id,gpu_num,submit_time,duration\na,1,2020-13-45 00:00:00,5\n",
            "log.csv:2: submit_time: expected seconds or a date-time",
            id="helios-bad-date",
        ),
    ],
)
def test_malformed_rows(tmp_path: Path, fmt: str, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    if fmt == "gavel":
        (tmp_path / "simulation_throughputs.json").write_text(
            (DATA / "gavel/simulation_throughputs.json").read_text()
        )
    with pytest.raises(ValidationError) as info:
        read_trace(f"{fmt}:{path}")
    assert info.value.message.startswith(f"{tmp_path}/{message}")
    assert "\n" not in info.value.message


def test_malformed_pai_and_node_rows(tmp_path: Path) -> None:
    jobs = tmp_path / "pai_job_table.csv"
    jobs.write_text("j1,i1,u1,Terminated,0,10\n")
    (tmp_path / "pai_task_table.csv").write_text("j1,worker,two,Terminated,0,10,100,1,100,T4\n")
    with pytest.raises(ValidationError, match=r"pai_task_table.csv:1: inst_num: expected a who"):
        read_trace(f"pai2020:{jobs}")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n")
    with pytest.raises(ValidationError, match=r"nodes.csv:2: model: expected the GPU model"):
        load(f"openb:openb/pods.csv?nodes={nodes}")


def test_bad_throughput_table(tmp_path: Path) -> None:
    (tmp_path / "a.trace").write_text("A3C\tcmd\t-n\t1\t100\t0\t1\n")
    table = tmp_path / "simulation_throughputs.json"
    table.write_text('{"v100": {"A3C": {"null": 1.0}}}')
    with pytest.raises(ValidationError, match=r"simulation_throughputs.json: v100: A3C: expected"):
        read_trace(f"gavel:{tmp_path / 'a.trace'}")
    table.write_text("{not json")
    with pytest.raises(ValidationError, match=r"simulation_throughputs.json:1: not valid JSON"):
        read_trace(f"gavel:{tmp_path / 'a.trace'}")
