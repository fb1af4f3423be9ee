"""The protocol lines the GPU test jobs print (workload_rank.py, torch_ipc_job.py) for their
harnesses to read: one line per write(2), so that processes sharing one stdout pipe never
interleave (a write of at most PIPE_BUF, 4096, bytes to a pipe is atomic), and the CHECK lines
with the count of failed checks."""

import os
import sys


class JobLines:
    """Lines tagged `tag` ("WL rank=0", "TI role=producer"); `round` goes into CHECK lines."""

    def __init__(self, tag):
        self.tag = tag
        self.round = 0
        self.failed = 0

    def say(self, text):
        """One protocol line in a single write(2), after whatever Python buffered."""
        sys.stdout.flush()
        sys.stderr.flush()
        line = f"{self.tag} {text}".encode(errors="replace")[:4000] + b"\n"
        os.write(1, line)

    def check(self, name, ok, detail=""):
        """A CHECK line for `name`; a failed one is counted."""
        if not ok:
            self.failed += 1
        self.say(f"round={self.round} CHECK {name} {'PASS' if ok else 'FAIL'} {detail}".rstrip())
