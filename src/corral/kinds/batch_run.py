"""Runs an ``sbatch`` script on the job's first node (the ``batch`` kind's rank 0).

``python -m corral.kinds.batch_run N CHUNK1 ... CHUNKN [ARGS...]``: the script's text in
N pieces, then its arguments. As Slurm's batch step does, it writes the script to a
private file and runs it in the task's working directory (the submit directory) with the
task's environment, its output and error in the files ``CORRAL_BATCH_OUTPUT`` and
``CORRAL_BATCH_ERROR`` name (patterns, :func:`expand_pattern`; default
``slurm-%j.out``, for an array element ``slurm-%A_%a.out``; the error file defaults to
the output file), and ``srun``/``scontrol`` on ``PATH`` (Corral's, :mod:`corral.kinds.srun`).

It stays the script's parent: the agent's SIGTERM reaches the script through the process
group, so it only waits, and exits with the script's exit code (128+N for signal N).
``CORRAL_BATCH_SIGNAL=SIG@SECONDS`` sends SIG to the script SECONDS after the start
(``--signal=B:SIG@TIME``, computed from the time limit).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

NO_ARRAY_INDEX = "4294967294"  # what Slurm writes for %a outside an array
PATTERN = re.compile(r"%(\d*)([%AajxNtnsuJ])")
NUMERIC = frozenset("Aajtn")
MAX_WIDTH = 10  # Slurm pads to at most 10 digits
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SHIMS = {"srun": "corral.kinds.srun", "scontrol": "corral.kinds.scontrol"}


def expand_pattern(pattern: str, values: Mapping[str, str]) -> str:
    """Slurm's file name pattern: ``%j`` job id, ``%A`` array job id, ``%a`` array
    index, ``%x`` job name, ``%N`` node, ``%t`` task id, ``%n`` node id, ``%s`` step,
    ``%u`` user, ``%J`` job.step, ``%%`` a percent sign; ``%4a`` pads a number with zeros
    to 4 digits (10 at most). Anything else is kept as written."""

    def one(match: re.Match[str]) -> str:
        width, key = match.group(1), match.group(2)
        if key == "%":
            return "%"
        value = values.get(key, "")
        if width and key in NUMERIC and value.isdigit():
            return value.zfill(min(int(width), MAX_WIDTH))
        return value

    return PATTERN.sub(one, pattern)


def pattern_values(env: Mapping[str, str], task: int = 0, step: str = "batch") -> dict[str, str]:
    """The values of :func:`expand_pattern` for a task with environment ``env``."""
    job = env.get("SLURM_JOB_ID") or env.get("CORRAL_JOB_ID", "0")
    return {
        "j": job,
        "A": env.get("SLURM_ARRAY_JOB_ID") or job,
        "a": env.get("SLURM_ARRAY_TASK_ID") or NO_ARRAY_INDEX,
        "x": env.get("SLURM_JOB_NAME", ""),
        "N": (env.get("CORRAL_NODE") or os.uname().nodename).split(".")[0],
        "t": str(task),
        "n": env.get("SLURM_NODEID", "0"),
        "s": step,
        "u": env.get("USER") or env.get("LOGNAME") or str(os.getuid()),
        "J": f"{job}.{step}",
    }


def default_output(env: Mapping[str, str]) -> str:
    return "slurm-%A_%a.out" if env.get("SLURM_ARRAY_TASK_ID") else "slurm-%j.out"


def _open(path: str, append: bool) -> int:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    return os.open(path, flags, 0o644)


def _shims(folder: Path) -> Path:
    """``srun`` and ``scontrol`` that run Corral's, with this interpreter."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name, module in SHIMS.items():
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
        shim.chmod(0o755)
    return bin_dir


def main(argv: list[str]) -> int:
    try:
        pieces = int(argv[0])
    except (IndexError, ValueError):
        print("usage: python -m corral.kinds.batch_run N CHUNK... [ARGS...]", file=sys.stderr)
        return 2
    script, args = "".join(argv[1 : 1 + pieces]), argv[1 + pieces :]
    env = dict(os.environ)
    values = pattern_values(env)
    output = expand_pattern(env.get("CORRAL_BATCH_OUTPUT") or default_output(env), values)
    error = expand_pattern(env.get("CORRAL_BATCH_ERROR") or "", values) or output
    append = env.get("CORRAL_BATCH_OPEN_MODE") == "append"
    try:
        out = _open(output, append)
        err = out if error == output else _open(error, append)
    except OSError as exc:
        print(f"corral sbatch: cannot open {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    where = output if error == output else f"{output} (errors: {error})"
    print(f"corral sbatch: the batch script's output goes to {where}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix=f"corral-batch-{values['j']}-"))
    try:
        path = folder / "slurm_script"
        path.write_text(script)
        path.chmod(0o700)
        shims = _shims(folder)
        env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', os.defpath)}"
        for name in SHIMS:  # also as bash functions: a login shell (#!/bin/bash -l) resets PATH
            env[f"BASH_FUNC_{name}%%"] = f'() {{  "{shims / name}" "$@"\n}}'

        for name in ("CORRAL_BATCH_OUTPUT", "CORRAL_BATCH_ERROR", "CORRAL_BATCH_OPEN_MODE"):
            env.pop(name, None)
        deliver = env.pop("CORRAL_BATCH_SIGNAL", "")
        for sig in FORWARDED:  # they reach the script through the process group
            signal.signal(sig, lambda *_: None)
        try:
            child = subprocess.Popen(
                [str(path), *args], stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env
            )
        except OSError as exc:  # its #! names no interpreter here, or the folder is noexec
            first = script.partition("\n")[0]
            message = f"corral sbatch: cannot run the batch script ({first}): {exc.strerror}\n"
            os.write(err, message.encode())  # where the script's errors would be
            print(message, end="", file=sys.stderr)
            return 127 if isinstance(exc, FileNotFoundError) else 126
        _arm_signal(child, deliver)
        code = child.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 128 - code if code < 0 else code


def _arm_signal(child: subprocess.Popen, spec: str) -> None:
    """``SIG@SECONDS``: send SIG to the script that many seconds from now."""
    if not spec:
        return
    number, _, after = spec.partition("@")

    def fire() -> None:
        if child.poll() is None:
            child.send_signal(int(number))

    timer = threading.Timer(float(after or 0), fire)
    timer.daemon = True
    timer.start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
