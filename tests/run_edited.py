"""Run copies of a numbered script with the reader's loop edits (helpers.LOOP_EDITS), one after another in this
process, and write what each printed and wrote as JSON: how tests/harness/test_edited_loops.py runs 06 under torchrun
(every rank runs every edit; each rank's results go to `<out>.rank<N>.json`).

    python tests/run_edited.py OUT_FOLDER SCRIPT [EDIT ...]      (all edits when none is named)
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # the repository root: `common`, as pytest has it
from helpers import LOOP_EDITS, run_edited  # noqa: E402

from common.harness.torchrun import exit_rank  # noqa: E402

PORT_WAIT_S = 600  # how long another rank waits for rank 0 to name an edit's port (a guard, nothing is timed)


def edit_port(folder: Path, n: int, rank: str) -> int:
    """A free port for edit `n`'s store: rank 0 asks the OS for one and writes it in `folder`; the other ranks read
    it there. (MASTER_PORT + 1 + n, as before, collided with ports other runs held: "Address already in use".)"""
    path = folder / f"port{n}"
    if rank == "0":
        with socket.socket() as probe:
            probe.bind(("localhost", 0))
            port = probe.getsockname()[1]
        path.with_suffix(".tmp").write_text(str(port))
        path.with_suffix(".tmp").replace(path)
        return port
    deadline = time.monotonic() + PORT_WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"rank {rank}: rank 0 named no port for edit {n}")
        time.sleep(0.05)
    return int(path.read_text())


def main(argv: list[str]) -> int:
    folder, name, *edits = argv
    rank = os.environ.get("RANK", "0")
    os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)  # rank 0 hosts a store of its own for each edit's run:
    results = {}  # a process group started again on torchrun's store waits forever
    for n, edit in enumerate(edits or LOOP_EDITS):
        os.environ["MASTER_PORT"] = str(edit_port(Path(folder), n, rank))
        results[edit] = run_edited(name, edit, Path(folder) / f"rank{rank}" / str(n))
    Path(folder, f"results.rank{rank}.json").write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    exit_rank(lambda: main(sys.argv[1:]))  # as 06 ends: no interpreter teardown for gloo's threads to abort
