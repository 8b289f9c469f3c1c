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
from pathlib import Path

import torch.distributed as dist

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # the repository root: `common`, as pytest has it
from helpers import LOOP_EDITS, run_edited  # noqa: E402

from common.harness.torchrun import exit_rank  # noqa: E402


def edit_port(store: dist.Store, n: int, rank: str) -> int:
    """A free port for edit `n`'s store: rank 0 asks the OS for one and sets it in torchrun's store; the other ranks
    get it there (the store's get waits for it). (MASTER_PORT + 1 + n, as before, collided with ports other runs
    held: "Address already in use".)"""
    if rank == "0":
        with socket.socket() as probe:
            probe.bind(("localhost", 0))
            store.set(f"run_edited/port{n}", str(probe.getsockname()[1]))
    return int(store.get(f"run_edited/port{n}"))


def main(argv: list[str]) -> int:
    folder, name, *edits = argv
    rank = os.environ.get("RANK", "0")
    torchruns = dist.TCPStore(os.environ.get("MASTER_ADDR", "localhost"), int(os.environ.get("MASTER_PORT", "29500")),
                              is_master=False, wait_for_workers=False)  # fmt: skip
    os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)  # rank 0 hosts a store of its own for each edit's run:
    results = {}  # a process group started again on torchrun's store waits forever
    for n, edit in enumerate(edits or LOOP_EDITS):
        os.environ["MASTER_PORT"] = str(edit_port(torchruns, n, rank))
        results[edit] = run_edited(name, edit, Path(folder) / f"rank{rank}" / str(n))
    Path(folder, f"results.rank{rank}.json").write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    exit_rank(lambda: main(sys.argv[1:]))  # as 06 ends: no interpreter teardown for gloo's threads to abort
