"""A stopped run's write (issue 51, under torchrun): its table, steps and label read from the exported trace instead of
torch's parse of every event (common.harness.trace_table), torchrun's grace read as torchrun sets it, and the
acknowledgement's warning where the trace may take longer to write than that grace."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.harness import recording, torchrun
from common.harness.loop import Schedule, read_steps
from common.harness.ticker import progress
from common.harness.trace_table import read_stopped

HANG_GUARD_S = 600


def op(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def write_trace(path, events: list[dict]) -> None:
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))


def rows(averages) -> dict[str, tuple[int, float, float]]:
    return {a.key: (a.count, round(a.cpu_time_total, 3), round(a.self_cpu_time_total, 3)) for a in averages}


def test_a_trace_s_ops_are_summed_with_self_time_outside_direct_children(tmp_path):
    trace = tmp_path / "t.json"
    write_trace(trace, [
        op("ProfilerStep#2", 0, 100, "user_annotation"),
        op("train_step", 1, 90, "user_annotation"),
        op("aten::linear", 2, 40), op("aten::addmm", 3, 30),  # linear's own: 10
        op("aten::linear", 50, 20), op("aten::addmm", 50, 20),  # the same start: the longer one is the parent
        op("ProfilerStep#3", 100, 10, "user_annotation"), op("train_step", 100, 10, "user_annotation"),
        op("PyTorch Profiler (0)", 0, 110, "Trace"),  # the profiler's own span: not in torch's table
        op("gloo:all_reduce", 5, 500, "user_annotation", tid=2),  # another thread: nobody's child
    ])  # fmt: skip
    averages, steps, label = read_stopped(trace)
    assert rows(averages) == {
        "ProfilerStep*": (2, 110.0, 10.0),
        "train_step": (2, 100.0, 40.0),
        "aten::linear": (2, 60.0, 10.0),
        "aten::addmm": (2, 50.0, 50.0),
        "gloo:all_reduce": (1, 500.0, 500.0),
    }
    assert (steps, label) == (2, "train_step")


def test_with_stack_python_frames_are_neither_rows_nor_parents(tmp_path):
    trace = tmp_path / "t.json"
    write_trace(trace, [
        op("train.py(9): <module>", 0, 100, "python_function"),
        op("ProfilerStep#2", 1, 90, "user_annotation"),
        op("nn.Module: Linear_0", 2, 80, "python_function"),
        op("fwd", 3, 70, "user_annotation"),
    ])  # fmt: skip
    averages, steps, label = read_stopped(trace)
    assert rows(averages) == {"ProfilerStep*": (1, 90.0, 20.0), "fwd": (1, 70.0, 70.0)}
    assert (steps, label) == (1, "fwd")


def test_the_trace_s_table_is_torch_s_key_averages_table(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(4, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=lambda _: None) as prof:  # fmt: skip
        for _ in range(5):
            with record_function("train_step"):
                model(x).square().mean().backward()
                opt.step()
                opt.zero_grad()
            prof.step()
    trace = tmp_path / "t.json"
    prof.export_chrome_trace(str(trace))
    averages, steps, label = read_stopped(trace)
    assert (steps, label) == read_steps(prof) == (3, "train_step")
    theirs = {a.key: (a.count, round(a.cpu_time_total), round(a.self_cpu_time_total)) for a in prof.key_averages()}
    ours = {a.key: (a.count, round(a.cpu_time_total), round(a.self_cpu_time_total)) for a in averages}
    assert ours.keys() == theirs.keys()
    for key in theirs:  # the same calls, and the same times to a microsecond (the trace rounds each to a nanosecond)
        assert ours[key][0] == theirs[key][0], key
        assert abs(ours[key][1] - theirs[key][1]) <= 1 and abs(ours[key][2] - theirs[key][2]) <= 1, key
    assert (
        averages.table(sort_by="cpu_time_total").splitlines()[1]
        == prof.key_averages().table(sort_by="cpu_time_total").splitlines()[1]
    )  # torch's own columns


def test_torchrun_s_grace_is_its_flag_before_the_script_s_own_flags(monkeypatch):
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", raising=False)
    monkeypatch.delenv("PET_SHUTDOWN_TIMEOUT", raising=False)
    if not torchrun.grace_settable():
        pytest.skip("this torch's torchrun has no --shutdown-timeout (torch 2.12 on)")
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--shutdown_timeout", "77",
                                 "06_ddp_training_step.py", "--shutdown-timeout", "5"])  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        cmdline = Path(f"/proc/{launcher.pid}/cmdline")
        while b"06_ddp" not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd
        assert torchrun.torchrun_grace(launcher.pid) == 77
    finally:
        launcher.kill()
        launcher.wait()


def test_torchrun_s_grace_is_the_environment_s_where_its_flag_is_not_given(monkeypatch):
    if not torchrun.grace_settable():
        pytest.skip("this torch's torchrun has no --shutdown-timeout (torch 2.12 on)")
    monkeypatch.delenv("PET_SHUTDOWN_TIMEOUT", raising=False)
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "45")
    assert torchrun.torchrun_grace(1 << 30) == 45  # no such process: no command line to read
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    assert torchrun.torchrun_grace(1 << 30) == torchrun.GRACE_S == 30


def acknowledged(recorded_s: float, grace_s: float, settable: bool) -> str:
    together = SimpleNamespace(grace_s=grace_s, grace_settable=settable)
    rec = SimpleNamespace(together=together, recording_since=time.monotonic() - recorded_s)
    return recording.Recording.past_grace(rec)


def test_a_signal_whose_write_may_outlast_torchrun_s_grace_says_how_to_raise_it():
    said = acknowledged(99 / recording.WRITE_PER_RECORDED_S, 30, settable=True)
    lines = said.splitlines()
    assert len(lines) == 3 and lines[0] == "" and all(len(line) <= 120 for line in lines), said
    assert "about 99 s to write, more than the 30 s torchrun waits" in said
    assert "torchrun --shutdown-timeout 200 " in said and "kill -INT <its pid>" in said


def test_a_signal_whose_write_fits_torchrun_s_grace_adds_nothing():
    assert acknowledged(1.0, 30, settable=True) == ""


def test_where_torchrun_s_grace_is_fixed_the_signal_names_a_rank_s_signal():
    said = acknowledged(100 / recording.WRITE_PER_RECORDED_S, 30, settable=False)
    assert "--shutdown-timeout" not in said and "kill -INT <its pid>" in said
    assert all(len(line) <= 120 for line in said.splitlines())


def noted(recorded_s: float, recorded: int, settable: bool = True, rank: int = 0) -> SimpleNamespace:
    together = SimpleNamespace(grace_s=30, grace_settable=settable)
    prof = SimpleNamespace(step_num=2 + recorded)  # wait=1, warmup=1: then the recorded steps
    since = time.monotonic() - recorded_s
    return SimpleNamespace(together=together, recording_since=since, prof=prof, schedule=Schedule(1, 1, 100_000),
                           grace_told=False, meta={"rank": rank}, holding=True)  # fmt: skip


def test_once_a_write_may_outlast_torchrun_s_grace_rank_0_says_so_once_while_it_runs():
    rec = noted(99.02 / recording.WRITE_PER_RECORDED_S, 1000)  # 99 s to write 1,000 steps: 9,902 s for 100,000
    said = recording.Recording.grace_note(rec)
    lines = said.splitlines()
    assert len(lines) == 2 and all(len(line) <= 120 for line in lines), said
    assert lines[0].startswith("note: from here a Ctrl-C to torchrun may lose the traces") and "30 s" in lines[0]
    flag = re.search(r"torchrun --shutdown-timeout (\d+) \.\.\. \(all 100,000 steps\)$", lines[1])
    assert flag and 19_810 <= int(flag[1]) <= 19_820, said  # twice the guess, in tens of seconds
    assert recording.Recording.grace_note(rec) is None  # once


def test_no_note_while_the_write_fits_torchrun_s_grace_nor_from_another_rank():
    assert recording.Recording.grace_note(noted(1.0, 1000)) is None
    assert recording.Recording.grace_note(noted(100 / recording.WRITE_PER_RECORDED_S, 1000, rank=1)) is None


def test_the_progress_thread_prints_its_note_under_its_line(capsys):
    notes = iter(["note: a line more", None])
    out = ""
    with progress("profiled steps", after_s=0.0, every_s=0.01) as ticker:
        ticker.note = lambda: next(notes, None)
        deadline = time.monotonic() + HANG_GUARD_S
        while "note: a line more" not in out and time.monotonic() < deadline:  # a guard against a hang, not a timing
            time.sleep(0.01)
            out += capsys.readouterr().out
    out += capsys.readouterr().out
    lines = out.splitlines()
    assert lines.count("note: a line more") == 1, out
    assert lines[lines.index("note: a line more") - 1].startswith("... "), out  # under a progress line
