"""A folder of traces is read a process per core: the same output in the same order, small results from the
workers, no pool for one file, and Ctrl-C still one line with no process left behind."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import PYTHON, ROOT, command, ev, tiny_gpu_trace

import common.analysis.folders as folders
import common.analysis.summary as summary_module
from common.analysis.digest import read_digest
from common.analysis.summary import main
from common.reader.build import read_trace


def _gpu_trace(tag: str, steps: int, kernels: int = 1) -> dict:
    """`steps` profiled steps, each launching `kernels` kernels."""
    events = []
    for n in range(steps):
        t = 1000.0 * n
        events.append(ev("user_annotation", f"ProfilerStep#{n}", t, 900))
        for k in range(kernels):
            corr = n * kernels + k + 1
            events.append(ev("cuda_runtime", "cudaLaunchKernel", t + 1 + k, 0.5, correlation=corr))
            events.append(ev("kernel", f"kernel_{k % 7}", t + 50 + 2 * k, 1.5, tid=7, correlation=corr))
    return {"traceEvents": events, "suite": {"script": "04_x", "tag": tag, "label": "fwd"}}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Five traces of different sizes, one of them not a trace, in two folders."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for i, steps in enumerate((2, 5, 30)):
        (tmp_path / "a" / f"t{i}.json").write_text(json.dumps(_gpu_trace(f"t{i}_bf16_cold_eager", steps, 3)))
    (tmp_path / "b" / "tiny.json").write_text(json.dumps(tiny_gpu_trace()))
    (tmp_path / "b" / "broken.json").write_text("{not json")
    return tmp_path


def test_a_folder_read_in_parallel_prints_what_one_process_prints(folder, capsys, monkeypatch):
    monkeypatch.setattr(folders, "usable_cores", lambda: 1)
    serial = command(main, capsys, folder, "--per-step")
    monkeypatch.setattr(folders, "usable_cores", lambda: 3)
    calls = []
    real = folders._read_in_parallel
    monkeypatch.setattr(folders, "_read_in_parallel", lambda *a: calls.append(a[2]) or real(*a))
    parallel = command(main, capsys, folder, "--per-step")
    assert calls == [3] and serial[0] == 0 and parallel == serial
    rows = [line.split()[0] for line in serial[1].split("\n\n")[1].splitlines()[2:]]
    assert rows == ["04_x/t0_bf16_cold_eager", "04_x/t1_bf16_cold_eager", "04_x/t2_bf16_cold_eager", "b/tiny"]
    assert "broken.json: not a readable Chrome trace" in serial[2]


def test_one_trace_is_read_in_this_process_without_a_pool(folder, capsys, monkeypatch):
    def no_pool(*_):
        raise AssertionError("a pool for one file")

    monkeypatch.setattr(folders, "_read_in_parallel", no_pool)
    code, out, _ = command(main, capsys, folder / "a" / "t1.json")
    assert code == 0 and "04_x/t1_bf16_cold_eager" in out


def test_a_worker_returns_the_small_figures_not_the_events(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_gpu_trace("big_bf16_cold_eager", 400, 20)))  # 8,000 kernels
    args = summary_module.parse_args([str(path), "--per-step"])
    sent = len(pickle.dumps(read_digest(path, args)))
    events = len(pickle.dumps(read_trace(path)))
    assert sent < events / 10, (sent, events)


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="needs signal masks")
def test_a_worker_starts_with_the_signals_blocked_until_it_has_its_own_handlers(folder, tmp_path, monkeypatch):
    """From fork until its initializer a worker runs the main process's handlers: SIGTERM from pool.terminate()
    there raised in the worker, and multiprocessing printed its traceback (seen under load). So every signal
    stays blocked from the fork until the worker has set its own."""
    real = folders.interrupts.in_worker
    record = tmp_path / "masks"
    record.mkdir()

    def in_worker() -> None:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set())
        (record / str(os.getpid())).write_text(" ".join(str(int(s)) for s in sorted(blocked)))
        real()

    monkeypatch.setattr(folders.interrupts, "in_worker", in_worker)
    args = summary_module.parse_args([str(folder)])
    paths = sorted(folder.rglob("*.json"))
    folders._read_in_parallel(paths, args, 2)
    masks = [set(map(int, f.read_text().split())) for f in record.iterdir()]
    wanted = {int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert len(masks) == 2 and all(wanted <= mask for mask in masks), masks
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) & {signal.SIGTERM, signal.SIGHUP} == set()


def _group(pgid: int) -> list[int]:
    """The processes of process group `pgid` still alive (not zombies)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the worker processes")
@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGHUP, False)],
    ids=["ctrl-c-to-the-group", "sigterm-to-the-pid", "sighup-to-the-pid"],
)
def test_a_signal_while_workers_read_a_folder_is_one_line_and_leaves_no_process(tmp_path, signum, to_group):
    """A terminal's Ctrl-C reaches the whole group; `kill PID`, a supervisor or a closed terminal only the
    summary's own process: either way one "interrupted" line, exit 128 + the signal, and the workers end with it,
    silently (no BrokenPipeError from a worker whose parent is gone)."""
    big = tmp_path / "big.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_trace.py"), "--mb", "10", "--out", str(big)],
                   check=True, capture_output=True)  # fmt: skip
    folder = tmp_path / "ranks"
    folder.mkdir()
    for i in range(16):
        os.link(big, folder / f"rank{i}.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*PYTHON, "-m", "common.summary", str(folder)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    while len(_group(proc.pid)) < 2 and proc.poll() is None:  # until a worker runs
        time.sleep(0.01)
    if to_group:
        os.killpg(proc.pid, signum)  # as a terminal's Ctrl-C: to the main process and its workers
    else:
        os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum and err.decode() == "interrupted\n" and out == b""
    assert _group(proc.pid) == []  # the summary joins its workers before it exits
    shutil.rmtree(folder)
