"""Starts one process per rank of a torch.distributed program the way torchrun's static
rendezvous would (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
rank 0 hosts the TCPStore through env:// initialisation), without torchrun's elastic agent,
and exits with the first non-zero exit status of a rank (0 when all pass).

Why: torchrun's agent (process name pt_elastic) holds an io_uring instance in torch 2.11
whatever its rendezvous and USE_LIBUV (measured, docs/MEASURED.md M16), and CRIU cannot dump
an io_uring; `cusnap dump` refuses such a tree before it changes anything. A job that is to
be dumped to disk starts its ranks this way (under `cusnap run`, which sets USE_LIBUV=0: the
rank-0 store is then the classic one).

    python3 rank_launcher.py --ranks N -- program.py [args...]
"""

import argparse
import os
import signal
import socket
import subprocess
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    port = str(free_port())
    ranks = []
    for r in range(args.ranks):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.ranks),
                   LOCAL_WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        ranks.append(subprocess.Popen([sys.executable] + program, env=env))

    def forward(signo, _frame):
        for p in ranks:
            if p.poll() is None:
                p.send_signal(signo)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    for p in ranks:
        rc = p.wait()
        if rc != 0 and status == 0:
            status = rc if rc > 0 else 128 - rc
    return status


if __name__ == "__main__":
    sys.exit(main())
