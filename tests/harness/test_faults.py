"""Promises kept under faults and at scale: concurrent runs, Ctrl-C, kills, full disks, huge shapes, long traces."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import CPU_DTYPE, ROOT, command, ev, run, start_script, tiny_gpu_trace, usage_error, written

import common.harness.export
import common.reader.build
from common.analysis.summary import main as summary_main
from common.cli import SuiteError
from common.harness.export import STALE_TEMP_S
from common.reader.build import parse, read_trace
from common.reader.model import Step


def start(*flags: str, traces: Path) -> subprocess.Popen:
    """`python 01_matmul_add.py FLAGS --traces-dir traces` in its own process, output unbuffered."""
    return start_script("01_matmul_add", *flags, traces=traces)


def wait_for_line(proc: subprocess.Popen, start: str) -> None:
    """Block until the run prints a line beginning with `start`."""
    for line in proc.stdout:
        if line.startswith(start):
            return
    raise AssertionError(f"the run ended before a line starting {start!r}")


def wait_until_about_to_profile(proc: subprocess.Popen) -> None:
    """Block until the run has said its CPU threads: the inputs are made next, then the profiled loop."""
    wait_for_line(proc, "CPU threads:")


@pytest.mark.slow
def test_concurrent_runs_into_one_folder_each_write_a_whole_trace(tmp_path):
    runs = [start("--size", "8", "--active", "100", traces=tmp_path) for _ in range(3)]
    results = [proc.communicate(timeout=300) for proc in runs]
    assert [proc.returncode for proc in runs] == [0, 0, 0], results
    files = written(tmp_path)
    tag = f"8_{CPU_DTYPE}_cold_eager_w1u1a100"
    assert [p.name for p in files] == [f"{tag}.json", f"{tag}.txt"]
    trace = read_trace(files[0])  # whole, valid JSON from exactly one of the runs
    assert len(trace.steps) == 100 and trace.meta["tag"] == tag


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_active_steps_prints_interrupted_and_leaves_no_trace(tmp_path, signum):
    proc = start("--size", "8", "--active", "1000000", traces=tmp_path)
    wait_until_about_to_profile(proc)
    time.sleep(1)  # inside the million active steps
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert written(tmp_path) == []


@pytest.mark.slow
def test_two_quick_ctrl_cs_inside_a_long_step_end_the_run_and_leave_nothing(tmp_path):
    proc = start("--size", "3000", "--dtype", "fp32", "--active", "1000000", traces=tmp_path)  # ~1 s matmuls
    wait_until_about_to_profile(proc)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)  # at once: the first has not reached a safe point yet
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "interrupted"
    assert written(tmp_path) == []


@pytest.mark.slow
def test_ctrl_c_during_the_warm_up_prints_interrupted_and_leaves_nothing(tmp_path):
    proc = start("--size", "5000", "--dtype", "fp32", "--warmup", traces=tmp_path)  # 5 calls of 250 GFLOP
    wait_until_about_to_profile(proc)
    time.sleep(2)  # the inputs are made, the warm-up calls have begun
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert "warm-up:" not in out and written(tmp_path) == []


@pytest.mark.slow
def test_sigterm_while_the_trace_is_saved_leaves_no_temporary_and_no_partial_trace(tmp_path):
    proc = start("--size", "8", "--active", "1000", traces=tmp_path)
    folder = tmp_path / "01_matmul_add"
    while proc.poll() is None and not list(folder.glob(".*.tmp")):  # the save has begun
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)  # taken at the first safe point: after the save, outside torch.profiler
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "interrupted"
    left = written(tmp_path)
    assert not [p for p in left if p.name.startswith(".")]
    if left:  # the output was checked before the signal was taken: both files, whole
        assert [p.suffix for p in left] == [".json", ".txt"] and len(read_trace(left[0]).steps) == 1000


HARD_EXIT = """
import os, signal, sys, time
from pathlib import Path
from common import interrupts
interrupts.install()
temporary = Path(sys.argv[1])
temporary.write_text("half a trace")
interrupts.removed_on_hard_exit(temporary)
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
except KeyboardInterrupt:
    pass  # the first signal, at a safe point; the second, below, must end the process at once
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
except KeyboardInterrupt:
    time.sleep(60)  # the watchdog thread ends the process meanwhile
"""


def test_a_second_signal_removes_the_open_temporaries_and_ends_at_once(tmp_path):
    temporary = tmp_path / ".t.json.x.tmp"
    done = subprocess.run(
        [sys.executable, "-c", HARD_EXIT, str(temporary)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 143 and done.stderr == "interrupted\n"
    assert not temporary.exists()


@pytest.mark.slow
def test_a_killed_run_leaves_no_final_file_and_the_next_removes_its_temporaries(tmp_path):
    proc = start("--size", "8", "--active", "1000000", traces=tmp_path)
    wait_until_about_to_profile(proc)
    time.sleep(1)
    proc.kill()
    proc.communicate(timeout=60)
    assert not [p for p in written(tmp_path) if not p.name.startswith(".")]
    folder = tmp_path / "01_matmul_add"
    folder.mkdir(exist_ok=True)
    stale, fresh = folder / f".8_{CPU_DTYPE}_cold_eager.json.x1.tmp", folder / f".8_{CPU_DTYPE}_cold_eager.json.x2.tmp"
    for path in (stale, fresh):
        path.write_text('{"traceEvents": [')  # what a kill during export leaves
    old = time.time() - STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    assert run("01_matmul_add", tmp_path, "--size", "8") == 0
    assert not stale.exists() and fresh.exists()  # a young temporary may belong to a run still writing


def test_a_full_disk_is_one_line_naming_the_path_and_leaves_no_file(tmp_path, capsys):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root): " + mounted.stderr.decode().strip())
    try:
        err = usage_error(lambda: run("01_matmul_add", disk, "--size", "8", "--active", "200"), capsys)
        assert "No space left on device" in err and str(disk / "01_matmul_add") in err
        assert written(disk) == []
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)  # the profiler may hold a file open


@pytest.mark.parametrize(
    "name, flags",
    [
        ("01_matmul_add", ["--size", "200000"]),
        ("02_linear", ["--in_dim", "1000000000"]),
        ("04_a_naive_attention", ["--seq", "100000"]),
        ("04_c_sdpa_attention", ["--seq", "100000", "--backend", "math"]),
    ],
)
def test_shapes_that_cannot_fit_are_refused_before_allocating(tmp_path, capsys, monkeypatch, name, flags):
    def no_tensor(*args, **kwargs):
        raise AssertionError("a tensor was allocated before the fit check")

    monkeypatch.setattr(torch, "randn", no_tensor)
    err = usage_error(lambda: run(name, tmp_path, *flags), capsys)
    assert "these shapes need about" in err and "GB" in err and "try smaller shapes" in err
    assert written(tmp_path) == []


def test_an_active_count_whose_events_cannot_fit_is_refused_before_the_run(tmp_path, capsys):
    err = usage_error(lambda: run("01_matmul_add", tmp_path, "--size", "8", "--active", "2147483647"), capsys)
    assert err.startswith("error: --active 2,147,483,647: about") and err.endswith(" fits") and len(err) <= 120
    assert written(tmp_path) == []


def test_absurd_integers_are_refused_when_parsed(tmp_path, capsys):
    assert "too large" in usage_error(lambda: run("01_matmul_add", tmp_path, "--size", "9" * 23), capsys)


@pytest.mark.parametrize("flags", [["--siz", "8"], ["--traces-dir", ""]])
def test_abbreviated_flags_and_an_empty_traces_dir_are_refused(tmp_path, capsys, flags):
    usage_error(lambda: load_main()([*flags]), capsys)


def load_main():
    from helpers import load_script

    return load_script("01_matmul_add").main


def test_a_dangling_link_as_traces_dir_is_one_clear_line(tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    err = usage_error(lambda: run("01_matmul_add", link, "--size", "8"), capsys)
    assert "a link to nothing" in err


def test_a_folder_at_the_traces_path_is_refused_before_profiling(tmp_path, capsys):
    (tmp_path / "01_matmul_add" / f"8_{CPU_DTYPE}_cold_eager.json").mkdir(parents=True)
    err = usage_error(lambda: run("01_matmul_add", tmp_path, "--size", "8"), capsys)
    assert "a folder is in the way" in err and f"8_{CPU_DTYPE}_cold_eager.json" in err and ".tmp" not in err


def many_steps(n: int) -> dict:
    """The tiny GPU trace's two steps, repeated to `n` steps."""
    base = tiny_gpu_trace()["traceEvents"]
    events = []
    for k in range(n // 2):
        for e in base:
            if e.get("ph") != "X":
                continue
            copy = {**e, "ts": e["ts"] + 200 * k, "args": dict(e["args"])}
            if "correlation" in copy["args"]:
                copy["args"]["correlation"] += 1000 * k
            if copy["name"].startswith("ProfilerStep#"):
                copy["name"] = f"ProfilerStep#{2 * k + int(copy['name'][-1]) - 2}"
            events.append(copy)
    return {"traceEvents": events}


def test_reading_a_trace_looks_at_its_steps_a_number_of_times_linear_in_their_count(monkeypatch):
    class CountingStep(Step):
        """A Step that counts how often any step's start or duration is looked at."""

        looks = 0

        def __getattribute__(self, name: str) -> object:
            if name in ("start_us", "dur_us"):
                CountingStep.looks += 1
            return super().__getattribute__(name)

    monkeypatch.setattr(common.reader.build, "Step", CountingStep)

    def looks(data: dict) -> int:
        CountingStep.looks = 0
        trace = parse(data)
        assert len(trace.steps) == sum(e["name"].startswith("ProfilerStep#") for e in data["traceEvents"])
        return CountingStep.looks

    assert looks(many_steps(40_000)) < 12 * looks(many_steps(4_000))  # a scan of every step per event: 100 times


def summary(capsys, *argv: object) -> tuple[int, str, str]:
    return command(summary_main, capsys, *argv)


def test_deeply_nested_json_is_one_line_naming_the_file(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    code, out, err = summary(capsys, path)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "nested too deeply" in err and str(path) in err


def test_events_with_nan_negative_or_infinite_durations_are_skipped_and_counted(tmp_path, capsys):
    data = tiny_gpu_trace()
    data["traceEvents"] += [ev("cpu_op", "aten::bad", 20, -5), ev("kernel", "k", 30, float("nan"), tid=7)]
    data["traceEvents"].append(ev("user_annotation", "ProfilerStep#9", 500, float("inf")))
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data))  # json writes NaN and Infinity, as Python reads them back
    trace = read_trace(path, region="fwd")
    assert trace.skipped == 3 and [s.number for s in trace.steps] == [2, 3]
    assert trace.steps[0].region_us == 80  # the good steps keep their figures
    code, out, _ = summary(capsys, path)
    assert code == 0 and f"{path}: 3 event(s) with a bad ts/dur skipped" in out


def test_string_timestamps_are_reported_as_such(tmp_path, capsys):
    data = tiny_gpu_trace()
    for e in data["traceEvents"]:
        if "ts" in e:
            e["ts"] = str(e["ts"])
    path = tmp_path / "strings.json"
    path.write_text(json.dumps(data))
    code, _, err = summary(capsys, path)
    assert code == 2 and "unusable ts or dur" in err and str(path) in err


def test_plot_into_a_folder_or_an_unwritable_place_is_refused_before_the_table(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tiny_gpu_trace()))
    for target, why in ((tmp_path, "is a folder"), (tmp_path / "no" / "such" / "p.png", "cannot write into")):
        code, out, err = summary(capsys, path, "--plot", target)
        assert (code, out) == (2, "") and why in err


def test_two_traces_with_the_same_name_are_told_apart_by_path(tmp_path, capsys):
    for folder in ("a", "b"):
        (tmp_path / folder / "04_x").mkdir(parents=True)
        (tmp_path / folder / "04_x" / "t.json").write_text(json.dumps(tiny_gpu_trace()))
    code, out, _ = summary(capsys, tmp_path, "--wide")
    assert code == 0
    assert f"04_x/t ({tmp_path / 'a' / '04_x' / 't.json'})" in out
    assert f"04_x/t ({tmp_path / 'b' / '04_x' / 't.json'})" in out


def test_ctrl_c_in_the_summary_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    import common.analysis.digest

    def interrupted(path, region=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(common.analysis.digest, "read_trace", interrupted)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tiny_gpu_trace()))
    code, out, err = summary(capsys, path)
    assert (code, out, err) == (130, "", "interrupted\n")


def earlier_pair(folder: Path) -> tuple[common.harness.export.TraceFiles, dict[str, bytes]]:
    """An earlier run's t.json and t.txt in `folder`, and a TraceFiles whose new pair waits in temporaries."""
    folder.mkdir()
    earlier = {"t.json": b'{"traceEvents": []} earlier', "t.txt": b"earlier table\n"}
    for name, data in earlier.items():
        (folder / name).write_bytes(data)
    files = common.harness.export.TraceFiles(SimpleNamespace(traces_dir=folder), "t", "fwd", None)
    for tmp, data, final in ((folder / ".t.txt.new.tmp", b"new table\n", files.txt),
                             (folder / ".t.json.new.tmp", b"new trace", files.json)):  # fmt: skip
        tmp.write_bytes(data)
        files.ready.append((tmp, final))
    return files, earlier


@pytest.mark.parametrize("errno_name", ["EPERM", "EXDEV"])
def test_a_failed_rename_of_the_json_puts_the_earlier_txt_back(tmp_path, monkeypatch, errno_name):
    files, earlier = earlier_pair(tmp_path / "traces")
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        if str(dst).endswith("t.json"):
            code = getattr(errno, errno_name)
            raise OSError(code, os.strerror(code), str(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(common.harness.export.os, "replace", replace)
    with pytest.raises(SuiteError, match="cannot write .*t.json"):
        files.commit()
    assert {p.name: p.read_bytes() for p in (tmp_path / "traces").iterdir()} == earlier  # no temporary left either


def test_a_commit_without_faults_replaces_the_pair_and_keeps_no_copy(tmp_path):
    files, _ = earlier_pair(tmp_path / "traces")
    files.commit()
    after = {p.name: p.read_bytes() for p in (tmp_path / "traces").iterdir()}
    assert after == {"t.json": b"new trace", "t.txt": b"new table\n"}
