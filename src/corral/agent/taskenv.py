"""What a task's environment keeps of the agent's own."""

from __future__ import annotations

from collections.abc import Mapping

# what a task running as another account keeps of the agent's environment
PORTABLE_VARIABLES = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "LD_LIBRARY_PATH")
PORTABLE_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_")


def task_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment without Corral's own settings and credentials (``CORRAL_*``:
    its token, join token, home, server): a task gets only the ``CORRAL_*`` variables the
    agent sets for it."""
    return {k: v for k, v in environ.items() if not k.startswith("CORRAL_")}


def foreign_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a task running as another Unix account keeps of the agent's environment: the
    locale, the search paths and the accelerator settings, nothing of the agent's own."""
    return {
        k: v
        for k, v in environ.items()
        if k in PORTABLE_VARIABLES or k.startswith(PORTABLE_PREFIXES)
    }
