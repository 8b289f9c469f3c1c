"""A signal never costs the reader a trace they already had: real signals sent to runs in subprocesses, at
several delays, and the earlier trace compared byte for byte. Also: a signal ignored from the start stays so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import PYTHON, ROOT, start_script

from common.reader.build import read_trace

# 05's tiny decoder block, as the issue ran it: a 21 MB trace whose save takes long enough to land signals in
TINY_05 = ["--batch", "1", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64", "--active", "60"]
POLL_S = 0.001
HANG_GUARD_S = 600  # a run that has not ended by then is stuck: only a guard, nothing is timed


def files(folder: Path) -> dict[str, bytes]:
    """The visible files of `folder` (a trace folder), name -> bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def wait_for_temporary(proc: subprocess.Popen, folder: Path) -> None:
    """Poll `folder` until the run's first hidden temporary appears: its save has begun."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not (folder.is_dir() and list(folder.glob(".*.tmp"))):
        assert proc.poll() is None, "the run ended before it began to save"
        assert time.monotonic() < deadline, "no temporary appeared"
        time.sleep(POLL_S)


@pytest.fixture(scope="module")
def earlier_05(tmp_path_factory) -> dict[str, bytes]:
    """A good run's two files, to be replaced (or not) by an interrupted rerun of the same tag."""
    traces = tmp_path_factory.mktemp("earlier")
    proc = start_script("05_training_step", *TINY_05, "--device", "cpu", traces=traces)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    earlier = files(traces / "05_training_step")
    assert sorted(Path(name).suffix for name in earlier) == [".json", ".txt"]
    return earlier


def rerun_05_over(tmp_path: Path, earlier: dict[str, bytes]) -> tuple[Path, subprocess.Popen]:
    """The earlier run's files in a fresh folder, and the same 05 run started over them, once its save began."""
    folder = tmp_path / "05_training_step"
    folder.mkdir()
    for name, data in earlier.items():
        (folder / name).write_bytes(data)
    proc = start_script("05_training_step", *TINY_05, "--device", "cpu", traces=tmp_path)
    wait_for_temporary(proc, folder)
    return folder, proc


@pytest.mark.slow
@pytest.mark.parametrize("delay_ms", [0, 50, 100, 150])
def test_two_ctrl_cs_while_05_saves_keep_the_earlier_trace_or_the_whole_new_one(tmp_path, earlier_05, delay_ms):
    folder, proc = rerun_05_over(tmp_path, earlier_05)
    time.sleep(delay_ms / 1000)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.02)
    os.kill(proc.pid, signal.SIGINT)  # the second: the hard exit, wherever the first has got to
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    after = files(folder)
    assert sorted(after) == sorted(earlier_05), f"files lost: {sorted(set(earlier_05) - set(after))}"
    assert hidden(folder) == []  # the hard exit removed this run's temporaries, and only those
    replaced = [name for name in after if after[name] != earlier_05[name]]
    assert replaced in ([], sorted(after)), f"one file replaced without the other: {replaced}"  # all or none
    if replaced:  # the renames landed: the new trace is whole
        trace = read_trace(folder / next(n for n in after if n.endswith(".json")))
        assert len(trace.steps) == 60
    lines = err.strip().splitlines()
    # 130 from the suite; -SIGINT (a shell shows 130 too) when both signals land as the finished run exits, after
    # its handlers went back to this test's SIG_DFL
    assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, err)
    assert "error:" not in err and "Traceback" not in err, err
    assert proc.returncode == 0 or lines[-1] == "interrupted" or (proc.returncode == -signal.SIGINT and replaced)


@pytest.mark.slow
def test_one_signal_during_the_save_lets_the_write_finish_and_says_so(tmp_path, earlier_05):
    folder, proc = rerun_05_over(tmp_path, earlier_05)
    os.kill(proc.pid, signal.SIGTERM)  # the save goes on to its end; the files are kept, marked, then the run ends
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "interrupted", err
    assert "SIGTERM: letting the trace's write finish, then stopping" in err
    after = files(folder)
    assert sorted(after) == sorted(earlier_05) and hidden(folder) == []
    assert all(after[name] != earlier_05[name] for name in after)  # both replaced, the new pair whole
    said = "stopped by SIGTERM while the trace was written, after its 60 steps"
    table = next(name for name in after if name.endswith(".txt"))
    assert after[table].decode().splitlines()[0] == said and said in out
    trace = read_trace(folder / next(name for name in after if name.endswith(".json")))
    assert len(trace.steps) == 60 and said in trace.notes


# `python -c LATE script.py ...`: the script, whose trace's write sends this process SIGINT as its last act (where it
# forgets the profiler's own temporaries, past its last look at a signal): the signal lands there every time.
LATE = (
    "import os, runpy, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
    "sys.path.insert(0, os.getcwd())\n"
    "import common.harness.export as export\n"
    "forget, sent = export.forget, []\n"
    "def late(*paths):\n"
    "    if not sent:\n"
    "        sent.append(os.kill(os.getpid(), signal.SIGINT))\n"
    "    return forget(*paths)\n"
    "export.forget = late\n"
    "script, *rest = sys.argv[1:]\n"
    "sys.argv = [script, *rest]\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


@pytest.mark.slow
def test_a_signal_at_the_very_end_of_the_write_keeps_the_trace_it_finished(tmp_path):
    proc = start_script("01_matmul_add", "--size", "8", "--device", "cpu", traces=tmp_path,
                        prefix=(sys.executable, "-c", LATE))  # fmt: skip
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    folder = tmp_path / "01_matmul_add"
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "interrupted", err
    assert sorted(p.suffix for p in folder.iterdir()) == [".json", ".txt"]  # kept, no temporary left
    assert "stopped by Ctrl-C while the trace was written, after its 3 steps" in out
    assert len(read_trace(next(folder.glob("*.json"))).steps) == 3


@pytest.mark.parametrize(
    "launcher, signum",
    [(("nohup",), signal.SIGHUP), (("bash", "-c", 'trap \'\' INT; exec "$0" "$@"'), signal.SIGINT)],
    ids=["nohup-SIGHUP", "trap-INT-SIGINT"],
)
@pytest.mark.slow
def test_a_signal_ignored_when_the_run_starts_stays_ignored(tmp_path, launcher, signum):
    prefix = (*launcher, sys.executable)
    proc = start_script("01_matmul_add", "--size", "8", "--active", "2000", traces=tmp_path, prefix=prefix)
    for line in proc.stdout:
        if line.startswith("CPU threads:"):  # the inputs, the 2002 profiled steps and the save are still ahead
            break
    os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0, err
    assert "interrupted" not in err and "\ntrace: " in out
    assert [p.suffix for p in sorted((tmp_path / "01_matmul_add").iterdir())] == [".json", ".txt"]


# 06 on the CPU: two gloo ranks under torchrun; one SIGINT to torchrun, which passes it on to both ranks
TINY_06 = ["--batch", "2", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64", "--dtype", "fp32"]


def start_torchrun(traces: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    return subprocess.Popen(
        [*PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", str(ROOT / "06_ddp_training_step.py"), *TINY_06, "--active", "40", "--device", "cpu",
         "--traces-dir", str(traces)],
        cwd=ROOT, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def earlier_06(tmp_path_factory) -> dict[str, bytes]:
    traces = tmp_path_factory.mktemp("earlier-ddp")
    proc = start_torchrun(traces)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    earlier = files(traces / "06_ddp_training_step")
    assert len(earlier) == 4  # rank 0's and rank 1's .json and .txt
    return earlier


def rerun_06_and_interrupt(tmp_path: Path, earlier: dict[str, bytes], when: str, delay_ms: int) -> dict[str, bytes]:
    """Rerun 06 into a folder holding `earlier`'s files; once `when` happens (a temporary appears, or rank 0's
    .json is replaced) and `delay_ms` later, send torchrun one SIGINT; what the folder holds once it ends."""
    folder = tmp_path / "06_ddp_training_step"
    folder.mkdir()
    for name, data in earlier.items():
        (folder / name).write_bytes(data)
    rank0 = folder / next(n for n in earlier if "_rank0" in n and n.endswith(".json"))
    before = rank0.stat().st_ino
    proc = start_torchrun(tmp_path)
    if when == "temporary":
        wait_for_temporary(proc, folder)
    else:
        deadline = time.monotonic() + HANG_GUARD_S
        while rank0.stat().st_ino == before:  # the rename gives the name a new file
            assert proc.poll() is None and time.monotonic() < deadline, "rank 0's trace was never replaced"
            time.sleep(POLL_S)
    time.sleep(delay_ms / 1000)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=HANG_GUARD_S)
    return files(folder)


def assert_each_rank_whole(earlier: dict[str, bytes], after: dict[str, bytes], folder: Path) -> list[int]:
    """Every rank has its .json and .txt: both the earlier run's, byte for byte, or both new with a whole trace.
    The ranks whose files are new."""
    assert sorted(after) == sorted(earlier), f"files lost: {sorted(set(earlier) - set(after))}"
    new = []
    for rank in (0, 1):
        names = sorted(n for n in after if f"_rank{rank}" in n)
        replaced = [n for n in names if after[n] != earlier[n]]
        assert replaced in ([], names), f"rank {rank}: one file replaced without the other: {replaced}"
        if replaced:
            new.append(rank)
            assert len(read_trace(folder / names[0]).steps) == 40
    return new


@pytest.mark.slow
@pytest.mark.parametrize("delay_ms", [0, 20])
def test_once_a_rank_has_replaced_its_trace_one_ctrl_c_to_torchrun_keeps_it(tmp_path, earlier_06, delay_ms):
    after = rerun_06_and_interrupt(tmp_path, earlier_06, "rank 0 replaced", delay_ms)
    assert 0 in assert_each_rank_whole(earlier_06, after, tmp_path / "06_ddp_training_step")


@pytest.mark.slow
@pytest.mark.parametrize("delay_ms", [0, 150])
def test_one_ctrl_c_to_torchrun_while_the_ranks_save_keeps_each_rank_whole(tmp_path, earlier_06, delay_ms):
    after = rerun_06_and_interrupt(tmp_path, earlier_06, "temporary", delay_ms)
    assert_each_rank_whole(earlier_06, after, tmp_path / "06_ddp_training_step")


SWALLOWED = """
import signal, sys, threading, time, weakref
from common import interrupts
interrupts.install()
class Thing:
    pass
thing = Thing()
def callback(_):  # Python swallows what a weakref callback raises ("Exception ignored in ...")
    # To this thread, not the process: os.kill's signal may go to the watchdog thread, handled once it runs (on a
    # loaded machine, after the callback returned), and the test would not test a swallowed interrupt at all.
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # handled before the call returns
    for _ in range(1000):  # the handler runs in here (at the latest on a backward jump) and raises Interrupted
        time.sleep(0)
    sys.exit("not raised in the callback")
ref = weakref.ref(thing, callback)
del thing
if interrupts._state.pending != signal.SIGINT:
    sys.exit("lost")
try:
    while True:  # the next safe point
        time.sleep(0.01)
except KeyboardInterrupt as exc:
    print(type(exc).__name__, exc.signum)
"""


def test_an_interrupt_raised_where_python_swallows_it_waits_for_the_next_safe_point():
    """CI once lost a Ctrl-C this way (a weakref callback of importlib's module locks), and the run went on."""
    done = subprocess.run([*PYTHON, "-c", SWALLOWED], cwd=ROOT, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)  # fmt: skip
    assert done.returncode == 0 and done.stdout.split() == ["Interrupted", str(int(signal.SIGINT))], done.stderr
    assert "Exception ignored" not in done.stderr


HARD_EXIT = """
import sys, pathlib
from common import interrupts
interrupts.install()
folder = pathlib.Path(sys.argv[1])
made = [folder / name for name in ("trace.tmp", "table.tmp", "trace.tmp.tmp")]  # the order a save makes them
for path in made:
    path.write_text("x")
interrupts.removed_on_hard_exit(*made)
libc = interrupts._state.unlink
print(type(libc).__name__, flush=True)
with open(folder / "order", "w") as log:
    def noting(path):
        log.write(path.decode() + "\\n")
        log.flush()
        return libc(path)
    interrupts._state.unlink = noting
    interrupts._hard_exit(2)
"""


def test_a_hard_exit_removes_temporaries_newest_first_through_libc_gil_held(tmp_path):
    """The main thread must not get to open a removed temporary by its name again before the exit: the watchdog
    unlinks through ctypes.PyDLL's libc (the GIL kept) and the newest first (Kineto's .tmp before its target)."""
    done = subprocess.run([sys.executable, "-c", HARD_EXIT, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 130 and done.stdout.strip() == "_FuncPtr", (done.stdout, done.stderr)
    names = [Path(line).name for line in (tmp_path / "order").read_text().splitlines()]
    assert names == ["trace.tmp.tmp", "table.tmp", "trace.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["order"]


# Run `python -m common.<command>` with a SIGINT sent to itself as the import of its reader's modules begins.
CTRL_C_AT_IMPORT = (
    "import builtins, os, runpy, signal, sys\n"
    "command, *sys.argv[1:] = sys.argv[1:]\n"
    "original = builtins.__import__\n"
    "def importing(name, *args, **kwargs):\n"
    "    if name == f'common.analysis.{command}':\n"
    "        builtins.__import__ = original\n"
    "        os.kill(os.getpid(), signal.SIGINT)\n"
    "    return original(name, *args, **kwargs)\n"
    "builtins.__import__ = importing\n"
    "runpy.run_module(f'common.{command}', run_name='__main__', alter_sys=True)\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["summary", "diff"])
def test_a_ctrl_c_while_the_reader_loads_is_one_interrupted_line(command):
    traces = [str(ROOT / "tests" / "fixtures" / "foreign" / "bare_profile.json.gz")] * 2
    done = subprocess.run(
        [*PYTHON, "-c", CTRL_C_AT_IMPORT, command, *traces],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")
