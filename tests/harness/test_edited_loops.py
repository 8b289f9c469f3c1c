"""The scripts are the reader's to edit: each edit of the profiler loop (helpers.LOOP_EDITS), applied to a copy of
every numbered script, runs and writes the trace the edited loop asks for, or says in one line what the suite
cannot follow; never a traceback. 01 to 05 run in this process; 06 under torchrun with two gloo ranks, every edit
in one launch. 03_kernels_mlp and 04_d need a GPU: on the CPU they refuse before the loop, in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import LOOP_EDITS, ROOT, SCRIPTS, command, report_lines, run_edited

from common.analysis import summary

ON_THE_CPU = [s for s in SCRIPTS if s not in ("03_kernels_mlp", "04_d_kernels_attention", "06_ddp_training_step")]
DDP = "06_ddp_training_step"


STEPS_OF = {"active=2": 2, "schedule removed": 1}  # the trace's steps where an edit makes them other than 3
SCHEDULE_OF = {"active=2": "wait=1, warmup=1, active=2, repeat=1", "wait=0, warmup=0": "wait=0, warmup=0, active=3, "
               "repeat=1", "repeat=2": "wait=1, warmup=1, active=3, repeat=2"}  # fmt: skip


def check_edit(edit: str, result: dict) -> None:
    """What each edit must give: the run ends 0 without a traceback, the trace (read back) is the edited loop's,
    and the report's lines say what the edited loop recorded: the schedule and the steps recorded, guess vs
    trace counted over the lines it checked, and the step time taken as the steps allow."""
    out, traces = result["out"], result["traces"]
    assert result["code"] == 0 and "Traceback" not in out + result["err"], out[-2000:] + result["err"][-2000:]
    if edit == "tensorboard_trace_handler":
        check_own_handler(result)
        return
    (name, trace), *more = traces.items()
    report, label = report_lines(out), trace["label"]
    assert trace["steps"] == STEPS_OF.get(edit, 3) and label == trace["meta"]["label"], (name, trace)
    marks = report["marks"].splitlines()
    checked = sum(mark in ("[ ok ]", "[MISS]") for mark in marks)
    assert checked and (f"all {checked} checked" in report["checked"] or f" of {checked} checked" in report["checked"])
    assert re.fullmatch(rf"step time: [\d.]+ (µs|ms|s) CPU \(the '{label}' label\), .+", report["step"]), report
    how = report["step"].split(" label), ", 1)[1]
    if edit == "schedule removed":
        assert "_noschedule" in name and not more
        assert report["loop"].startswith("profiled: no schedule, all 5 steps in one recording (no ProfilerStep#N), ")
        assert report["guess"].startswith(f"guess vs trace (per call of {label!r}: 5 calls in the one recorded step")
        assert how.startswith("per call: ") and how.endswith(" over its 5 calls")
        # the verdict is wrapped at 120 columns where its figures' widths put the break: read it as one line
        assert "of CPU in the one recording (no ProfilerStep#N)" in " ".join(out.split())
        return
    recorded = f"schedule({SCHEDULE_OF.get(edit, 'wait=1, warmup=1, active=3, repeat=1')}), {trace['steps']} steps"
    assert report["loop"].startswith(f"profiled: {recorded} recorded, ") and report["loop"].endswith(f"{label!r}")
    if edit == "active=2":
        assert "_w1u1a2" in name and not more and report["guess"].endswith("steps #2, #3)")
        assert how.startswith("the later of 2 profiled steps (the first: ") and report["notes"] == ""
        return
    assert how == "median of 3 profiled steps"
    if edit == "wait=0, warmup=0":
        assert "_w0u0a3" in name and report["guess"].endswith("steps #0, #1, #2)")
        assert report["notes"].startswith("(no profiler warm-up step")
        return
    assert report["guess"].endswith("steps #2, #3, #4)") and report["notes"] == ""
    if edit == "repeat=2":
        assert [n for n in traces] == [name, name.replace(".json", "_cycle2.json")] and "_w1u1a3r2" in name
        assert [t["steps"] for t in traces.values()] == [3, 3] and "(cycle 2 of 2)" in out
        return
    assert not more and "_w" not in name
    options = report["loop"].split(" recorded, ", 1)[1].rsplit(", label ", 1)[0].split(", ")
    if edit == "label renamed":
        assert label == "my_label" and options == ["record_shapes"]
    elif edit == "record_shapes removed":
        assert options == ["no options"]
    elif edit.endswith("=True"):
        assert options == ["record_shapes", edit.split("=")[0]]
    else:
        assert options == ["record_shapes"]


def check_own_handler(result: dict) -> None:
    """The loop's own tensorboard_trace_handler: no trace of the suite's, and the run says whose handler got the
    trace, where it wrote it and how to read it, in lines of at most 120 columns, checking the output once."""
    out, folder = result["out"], result["tb_dir"]
    assert result["traces"] == {} and len(result["tensorboard"]) == 1 and out.count("matches the reference") == 1
    tail = out[out.index("the loop's own on_trace_ready") :].splitlines()
    assert tail == [
        "the loop's own on_trace_ready (tensorboard_trace_handler) got the trace: the suite wrote none and has no "
        "report on it",
        f"trace: {folder}/{result['tensorboard'][0]} (written by tensorboard_trace_handler)",
        f"read it with: uv run python -m common.summary {folder}",
    ]
    assert len(tail[0]) <= 120


@pytest.mark.parametrize("edit", list(LOOP_EDITS))
@pytest.mark.parametrize("script", ON_THE_CPU)
def test_an_edited_loop_runs_as_edited(script, edit, tmp_path):
    check_edit(edit, run_edited(script, edit, tmp_path))


def test_the_summary_reads_the_trace_of_the_loops_own_handler(tmp_path, capsys):
    result = run_edited("01_matmul_add", "tensorboard_trace_handler", tmp_path)
    code, out, err = command(summary.main, capsys, result["tb_dir"])
    row = "tb/" + result["tensorboard"][0].removesuffix(".json")
    assert code == 0 and err == "" and "CPU = the ProfilerStep#N span." in out
    assert any(line.startswith(row) and re.search(r" [\d.]+ (µs|ms|s) ", line) for line in out.splitlines()), out


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


@pytest.mark.slow
@pytest.mark.parametrize("edit", list(LOOP_EDITS))
def test_an_edited_ddp_loop_runs_as_edited(edit, ddp_edits):
    check_edit(edit, ddp_edits[edit])
