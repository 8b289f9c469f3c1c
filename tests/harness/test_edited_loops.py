"""The scripts are the reader's to edit: each edit of the profiler loop (helpers.LOOP_EDITS), applied to a copy of
every numbered script, runs and writes the trace the edited loop asks for, or says in one line what the suite
cannot follow; never a traceback. 01 to 05 run in this process; 06 under torchrun with two gloo ranks, every edit
in one launch. 03_kernels_mlp and 04_d need a GPU: on the CPU they refuse before the loop, in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import LOOP_EDITS, ROOT, SCRIPTS, run_edited

ON_THE_CPU = [s for s in SCRIPTS if s not in ("03_kernels_mlp", "04_d_kernels_attention", "06_ddp_training_step")]
DDP = "06_ddp_training_step"


def check_edit(edit: str, result: dict) -> None:
    """What each edit must give: the run ends 0 without a traceback, and the trace (read back) is the edited loop's."""
    out, traces = result["out"], result["traces"]
    assert result["code"] == 0 and "Traceback" not in out + result["err"], out[-2000:] + result["err"][-2000:]
    profiled = out[out.index("profiled:") :].split("\n  (")[0].split("\n\n")[0] if traces else ""
    names = sorted(traces)
    if edit == "active=2":
        assert len(names) == 1 and "_w1u1a2" in names[0] and traces[names[0]]["steps"] == 2
        assert "active=2" in profiled and "2 steps recorded" in profiled
    elif edit == "wait=0, warmup=0":
        assert len(names) == 1 and "_w0u0a3" in names[0] and traces[names[0]]["steps"] == 3
        assert "wait=0, warmup=0" in profiled and "no profiler warm-up step" in out
    elif edit == "repeat=2":
        assert len(names) == 2 and all("_w1u1a3r2" in n for n in names) and "_cycle2" in names[1]
        assert [t["steps"] for t in traces.values()] == [3, 3] and "(cycle 2 of 2)" in out
    elif edit == "tensorboard_trace_handler":
        assert traces == {} and len(result["tensorboard"]) == 1
        assert "on_trace_ready is not rec.save, so the suite wrote no trace" in out
    else:
        assert len(names) == 1 and "_w" not in names[0] and traces[names[0]]["steps"] == 3
        option = edit.split("=")[0]
        if edit == "label renamed":
            assert traces[names[0]]["label"] == "my_label" == traces[names[0]]["meta"]["label"]
        elif edit == "record_shapes removed":
            assert "record_shapes" not in profiled
        elif edit.endswith("=True"):
            assert option in profiled and "record_shapes" in profiled


@pytest.mark.parametrize("edit", list(LOOP_EDITS))
@pytest.mark.parametrize("script", ON_THE_CPU)
def test_an_edited_loop_runs_as_edited(script, edit, tmp_path):
    check_edit(edit, run_edited(script, edit, tmp_path))


@pytest.mark.parametrize("script", ["03_kernels_mlp", "04_d_kernels_attention"])
def test_an_edited_gpu_only_script_is_refused_on_the_cpu_in_one_line(script, tmp_path):
    result = run_edited(script, "active=2", tmp_path)
    assert result["code"] == 2 and result["traces"] == {}
    assert len(result["err"].strip().splitlines()) == 1 and "needs a CUDA GPU" in result["err"]


@pytest.fixture(scope="module")
def ddp_edits(tmp_path_factory) -> dict:
    """Every edit of 06, run one after another in one torchrun launch of two gloo ranks: rank 0's results."""
    folder = tmp_path_factory.mktemp("ddp_edits")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(ROOT / "tests" / "run_edited.py"), str(folder), DDP],
        cwd=ROOT / "tests", env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((folder / "results.rank0.json").read_text())


@pytest.mark.parametrize("edit", list(LOOP_EDITS))
def test_an_edited_ddp_loop_runs_as_edited(edit, ddp_edits):
    check_edit(edit, ddp_edits[edit])
