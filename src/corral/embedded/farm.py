"""Start many ``corral agent`` processes at the cost of one interpreter start.

``corral up --nodes 64`` used to start 64 interpreters, each importing the agent (about
0.5 s of CPU apiece: 30 s on a 2-core machine before the cluster was up). The farm imports
the agent once, then forks one child per agent before any thread exists; each child is
a separate process in a session of its own, with its own log, exactly as if started
alone (``random`` reseeds itself in a forked child). The farm stays as their parent only
to reap them, and exits once none is left; stopping an agent is signalling its pid.

Protocol: run ``python -m corral.embedded.farm`` (it imports at once); write on its stdin
a JSON list of ``{"argv": [...], "log": PATH}`` (``argv`` as after ``corral``), then close
it. It answers one JSON list on stdout: the children's pids, in the same order.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typer.core import TyperGroup


def _preload() -> TyperGroup:
    """Import what an agent runs and build the ``corral`` command (Typer's build costs
    more than an agent's own start), so that forked children need neither."""
    import typer

    import corral.agent.agent  # noqa: F401  (and what ``corral agent`` imports when run)
    import corral.agent.host  # noqa: F401
    import corral.cli.common  # noqa: F401
    import corral.privatefiles  # noqa: F401
    from corral.cli.main import app

    return typer.main.get_command(app)


def _child(command: TyperGroup, argv: list[str], log: Path) -> None:
    """Become one agent: a session of its own, the log as stdout and stderr; never returns."""
    code = 1
    try:
        os.setsid()
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        from corral.errors import CorralError

        try:
            command.main(args=argv, prog_name="corral")  # (exits: SystemExit)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except CorralError as exc:  # as ``corral``'s main says it
            print(f"error: {exc.message}", file=sys.stderr)
    except BaseException:  # noqa: BLE001 -- report it in the agent's log, then leave
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def fork_all(command: TyperGroup, specs: list[dict]) -> list[int]:
    """Fork one agent per spec; the children's pids."""
    pids = []
    for spec in specs:
        pid = os.fork()
        if pid == 0:
            _child(command, [str(a) for a in spec["argv"]], Path(spec["log"]))
        pids.append(pid)
    return pids


def main() -> None:
    command = _preload()  # while the caller waits for its server to come up
    specs = json.load(sys.stdin)
    gc.freeze()  # (the children's copy-on-write pages stay shared: no collection touches them)
    pids = fork_all(command, specs)
    sys.stdout.write(json.dumps(pids) + "\n")
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the caller reads to the end: give it the end now
    os.close(null)
    left = set(pids)
    while left:
        try:
            pid, _ = os.wait()
        except ChildProcessError:
            break
        left.discard(pid)


if __name__ == "__main__":
    main()
