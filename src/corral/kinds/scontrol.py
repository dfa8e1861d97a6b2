"""``scontrol`` inside a Corral batch job: the host list commands batch scripts use to
find their nodes (``scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1`` for the
master address).

- ``scontrol show hostnames [LIST]``: one host per line (default: ``SLURM_JOB_NODELIST``);
- ``scontrol show hostlist LIST`` / ``hostlistsorted LIST``: the compressed form
  (``LIST`` may be a comma-separated list of names).

Anything else is refused with a message naming what is supported.
"""

from __future__ import annotations

import os
import signal
import sys

from corral.core.hostlist import compress, expand

USAGE = "scontrol show hostnames [HOSTLIST] | show hostlist HOSTS | show hostlistsorted HOSTS"


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head -n 1`: end quietly, as C tools do
    words = [w for w in argv if not w.startswith("-")]
    if len(words) < 2 or words[0] != "show" or len(words) > 3:
        what = " ".join(argv) or "(nothing)"
        print(
            f"scontrol: error: {what}: Corral's scontrol supports only {USAGE}; for jobs use "
            "`corral show`, `corral hold`/`release` and `corral cancel`",
            file=sys.stderr,
        )
        return 1
    command = words[1].lower()
    given = words[2] if len(words) == 3 else os.environ.get("SLURM_JOB_NODELIST", "")
    try:
        hosts = expand(given)
        if command == "hostnames":
            for host in hosts:
                print(host)
        elif command in ("hostlist", "hostlistsorted"):
            print(compress(hosts, sort=command == "hostlistsorted"))
        else:
            print(f"scontrol: error: show {words[1]}: supported: {USAGE}", file=sys.stderr)
            return 1
    except ValueError as exc:
        print(f"scontrol: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
