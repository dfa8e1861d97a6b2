"""A tiny distributed job with no dependencies: every rank meets at MASTER_ADDR:MASTER_PORT.

Rank 0 listens, the others connect and send their rank and GPUs; rank 0 sums the ranks
(an all-reduce by hand) and sends the total back. Each rank prints what it saw. Used by
``corral demo`` and the end-to-end tests; run it with ``corral submit -- python -m
corral.examples.allreduce``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    me = {"rank": rank, "node": os.environ.get("CORRAL_NODE"), "gpus": gpus}
    total = _serve(port, world, me) if rank == 0 else _join(addr, port, me)
    expected = world * (world - 1) // 2
    print(
        f"rank {rank}/{world} on {me['node']} local_rank {os.environ['LOCAL_RANK']} "
        f"gpus [{gpus}] master {addr}:{port}: sum of ranks = {total} "
        f"({'ok' if total == expected else 'WRONG'})",
        flush=True,
    )
    return 0 if total == expected else 1


def _serve(port: int, world: int, me: dict) -> int:
    with socket.create_server(("", port), reuse_port=False) as server:
        server.settimeout(120)
        peers, seen = [], [me]
        while len(peers) < world - 1:
            conn, _ = server.accept()
            seen.append(json.loads(conn.makefile().readline()))
            peers.append(conn)
        total = sum(p["rank"] for p in seen)
        for conn in peers:
            conn.sendall(f"{total}\n".encode())
            conn.close()
    return total


def _join(addr: str, port: int, me: dict) -> int:
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection((addr, port), timeout=120) as conn:
                conn.sendall((json.dumps(me) + "\n").encode())
                return int(conn.makefile().readline())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
