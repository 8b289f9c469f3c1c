"""A Ctrl-C (SIGTERM) during the profiled steps (issue 51): said at once on stderr, the loop stopped at the end of the
step in progress, the steps recorded kept in one whole trace that says it stopped early, exit 130 (143). Real
signals sent to runs in subprocesses once their profiled steps are under way (helpers.marking); nothing is timed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import MARK, MARKING, ROOT, STARTED, command, marking, start_script, wait_for_mark

from common.analysis.summary import main as summary_main
from common.harness import ranks, torchrun
from common.reader.build import read_trace

SLOW_FIXTURES = {"tiny", "ddp"}
# 01's steps of tens of microseconds, as the issue ran it: a step's Python is mostly the profiler's own
TINY = ["--size", "8", "--active", "100000", "--device", "cpu"]
TINY_MARK = 1000  # the signal follows the 1000th call of the step (wait=1, warmup=1: the 998th profiled step)
HANG_GUARD_S = 600  # a run that has not ended by then is stuck: only a guard, nothing is timed
POLL_S = 0.001
ACK = re.compile(
    r"^(Ctrl-C|SIGTERM): stopping after this step \(step ([\d,]+) of ([\d,]+)(, [^)]*)?\); "
    r"(Ctrl-C again|a second signal) quits now, keeping no trace$",
    re.M,
)
STOPPED = re.compile(r"stopped by (Ctrl-C|SIGTERM) after ([\d,]+) of ([\d,]+) profiled steps")


@dataclass
class Stopped:
    code: int
    out: str
    err: str
    folder: Path  # traces/<script>


def stop_at_mark(script: str, label: str, call: int, flags: list[str], traces: Path, signum: int) -> Stopped:
    """Start `script`, send it `signum` once it enters its `call`-th record_function(label), and let it end."""
    proc = start_script(script, *flags, traces=traces, prefix=marking(label, call))
    before = wait_for_mark(proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    return Stopped(proc.returncode, out, "".join(before) + err, traces / script)


def visible(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def number(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Stopped:
    """01 at --size 8 with 100,000 profiled steps, one Ctrl-C once they are under way."""
    return stop_at_mark("01_matmul_add", "matmul_add", TINY_MARK, TINY, tmp_path_factory.mktemp("tiny"), signal.SIGINT)


@pytest.mark.slow
def test_a_ctrl_c_in_tiny_steps_is_acknowledged_with_the_step_it_stops_after(tiny):
    said = ACK.findall(tiny.err)
    assert len(said) == 1, tiny.err
    who, step, of, left, again = said[0]
    assert (who, of, left, again) == ("Ctrl-C", "100,000", "", "Ctrl-C again"), said
    assert TINY_MARK - 2 <= number(step) < 100_000
    assert tiny.err.strip().splitlines()[-1] == "interrupted"  # the ack came first, and only one line after it


@pytest.mark.slow
def test_a_ctrl_c_in_tiny_steps_exits_130_keeping_one_whole_trace(tiny):
    assert tiny.code == 130, tiny.err[-2000:]
    assert "Traceback" not in tiny.err and "error:" not in tiny.err
    assert sorted(Path(name).suffix for name in visible(tiny.folder)) == [".json", ".txt"]
    assert hidden(tiny.folder) == []  # no temporary left behind
    assert "stopped by Ctrl-C after" in tiny.out  # the run says what it kept and what it skipped
    assert "the output check, the guess and the report were skipped" in tiny.out


@pytest.mark.slow
def test_the_summary_reads_the_kept_trace_as_stopped_early(tiny, capsys):
    trace = next(tiny.folder.glob("*.json"))
    code, out, _ = command(summary_main, capsys, trace)
    assert code == 0
    stopped = STOPPED.findall(out)
    assert len(stopped) == 1, out
    who, kept, of = stopped[0]
    assert (who, of) == ("Ctrl-C", "100,000")
    assert len(read_trace(trace).steps) == number(kept) < 100_000  # what the note says the trace holds
    acknowledged = number(ACK.findall(tiny.err)[0][1])
    assert acknowledged <= number(kept) <= acknowledged + 1  # the step in progress as the signal came (or the next)
    assert (tiny.folder / trace.name).with_suffix(".txt").read_text().splitlines()[0] == " ".join(
        ["stopped by Ctrl-C after", kept, "of 100,000 profiled steps"]
    )


@pytest.mark.slow
def test_sigterm_in_tiny_steps_stops_them_the_same_way_and_exits_143(tmp_path):
    ran = stop_at_mark("01_matmul_add", "matmul_add", TINY_MARK, TINY, tmp_path, signal.SIGTERM)
    assert ran.code == 143, ran.err[-2000:]
    said = ACK.findall(ran.err)
    assert [(who, again) for who, _, _, _, again in said] == [("SIGTERM", "a second signal")], ran.err
    trace = next(ran.folder.glob("*.json"))
    meta = read_trace(trace).notes
    assert any(STOPPED.fullmatch(note) and note.startswith("stopped by SIGTERM") for note in meta), meta


@pytest.mark.slow
def test_a_ctrl_c_in_a_slow_cpu_step_says_how_long_the_step_has_left(tmp_path):
    # 04_a's default shape at --batch 16: seconds a step on a CPU (2.8 s on the 2-core CI machine); the line says
    # what is left of the step for steps of a second or more. The mark: the first profiled step's work begins.
    flags = ["--batch", "16", "--device", "cpu"]
    ran = stop_at_mark("04_a_naive_attention", "attn_fwd", 3, flags, tmp_path, signal.SIGINT)
    assert ran.code == 130, ran.err[-2000:]
    said = ACK.findall(ran.err)
    assert len(said) == 1, ran.err
    _, step, of, left, _ = said[0]
    assert (step, of) == ("1", "3")
    kept = read_trace(next(ran.folder.glob("*.json"))).steps
    assert "stopped by Ctrl-C after 1 of 3 profiled steps" in ran.out and len(kept) == 1
    told = re.fullmatch(r", (about \S+ \S+ left in it|\S+ \S+ into it, longer than the \S+ \S+ of the last)", left)
    # a step of a second or more says what is left of it (a faster CPU's shorter step may say nothing)
    assert told if kept[0].dur_us >= 1.5e6 else (told or left == ""), (left, kept[0].dur_us)


@pytest.mark.slow
def test_a_second_ctrl_c_while_the_stopped_trace_is_written_keeps_the_earlier_files(tmp_path, tiny):
    earlier = visible(tiny.folder)  # a stopped run's files of the same tag, in a fresh folder
    folder = tmp_path / "01_matmul_add"
    folder.mkdir()
    for name, data in earlier.items():
        (folder / name).write_bytes(data)
    proc = start_script("01_matmul_add", *TINY, traces=tmp_path, prefix=marking("matmul_add", 10 * TINY_MARK))
    wait_for_mark(proc)  # 10,000 steps recorded: their trace takes a while to write
    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + HANG_GUARD_S
    while not list(folder.glob(".*.tmp")):  # the stopped trace's write has begun
        assert proc.poll() is None, "the run ended before it wrote its trace"
        assert time.monotonic() < deadline, "no temporary appeared"
        time.sleep(POLL_S)
    proc.send_signal(signal.SIGINT)  # the second: quits at once
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 130, err[-2000:]
    assert len(ACK.findall(err)) == 1 and err.strip().splitlines()[-1] == "interrupted", err
    assert visible(folder) == earlier  # nothing half-written under a final name, the earlier files as they were
    assert hidden(folder) == []


@pytest.mark.slow
def test_a_stopped_run_ends_without_the_interpreter_s_teardown(tmp_path):
    # a finished run ends through end_process (os._exit): a stopped one must too, or Python frees torch's events of
    # every recorded step one by one before the exit (2 s for 7,000 tiny steps); atexit handlers run only then
    teardown = "import atexit, os\natexit.register(lambda: os.write(2, b'TEARDOWN\\n'))\n"
    prefix = (sys.executable, "-c", teardown + MARKING, "matmul_add", str(TINY_MARK))
    proc = start_script("01_matmul_add", *TINY, traces=tmp_path, prefix=prefix)
    wait_for_mark(proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 130 and "stopped by Ctrl-C after" in out, err[-2000:]
    assert "TEARDOWN" not in err and err.strip().splitlines()[-1] == "interrupted"


# The reference, computed after the profile has written its trace, made as long as the signal takes to come: the
# profile's __exit__ (its trace written, through rec.save) marks, then waits outside torch's profiler code
AFTER_WRITE = (
    "import os, runpy, signal, sys, time\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
    "script, *rest = sys.argv[1:]\n"
    "import torch.profiler\n"
    "exit_ = torch.profiler.profile.__exit__\n"
    "def exited(self, *exc):\n"
    "    out = exit_(self, *exc)\n"
    f"    os.write(2, b'{MARK}\\n')\n"
    "    while True:\n"
    "        time.sleep(0.01)\n"
    "torch.profiler.profile.__exit__ = exited\n"
    "sys.argv = [script, *rest]\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


@pytest.mark.slow
def test_a_ctrl_c_after_the_steps_were_written_keeps_them_skipping_the_output_check(tmp_path, capsys):
    # every profiled step recorded and written, the reference still running: the recording is kept, as a stop
    # during the steps keeps it, and both files and the summary say the output check never ran
    proc = start_script("01_matmul_add", "--size", "64", "--device", "cpu", traces=tmp_path,
                        prefix=(sys.executable, "-c", AFTER_WRITE))  # fmt: skip
    wait_for_mark(proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    said = "stopped by Ctrl-C after all 3 profiled steps, before the output check"
    assert proc.returncode == 130 and f"{said}: the output check, the guess and the report were skipped" in out, err
    folder = tmp_path / "01_matmul_add"
    (trace,), (table,) = folder.glob("*.json"), folder.glob("*.txt")
    assert hidden(folder) == [] and table.read_text().splitlines()[0] == said
    assert read_trace(trace).meta["stopped"] == said and len(read_trace(trace).steps) == 3
    code, printed, _ = command(summary_main, capsys, trace)
    assert code == 0 and said in printed


# 06 under torchrun: two gloo ranks on the CPU, one Ctrl-C to torchrun (it passes SIGINT on to each rank)
TINY_06 = ["--batch", "2", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64", "--dtype", "fp32"]
DDP_MARK = 40  # the signal follows a rank's 40th train_step (wait=1, warmup=1: its 38th profiled step)
LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def start_06(traces: Path, mark: int = DDP_MARK, grace_s: int | None = None) -> tuple[subprocess.Popen, list[str]]:
    """06 on two ranks with 100,000 profiled steps, started and run until a rank enters its `mark`-th step; what it
    said so far. `grace_s`: torchrun's shutdown timeout (TORCH_ELASTIC_SHUTDOWN_TIMEOUT); None: its default, 30 s."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER and not k.startswith(("TORCHELASTIC", "PET_"))}
    env.pop("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)
    env.update({} if grace_s is None else {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(grace_s)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--no-python",
         *marking("train_step", mark), str(ROOT / "06_ddp_training_step.py"), *TINY_06, "--active", "100000",
         "--device", "cpu", "--traces-dir", str(traces)],
        cwd=ROOT, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    STARTED.append(proc)
    return proc, wait_for_mark(proc)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> Stopped:
    """06 on two ranks, one SIGINT to torchrun once a rank is under way."""
    traces = tmp_path_factory.mktemp("ddp")
    proc, before = start_06(traces)
    proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C does: torchrun's ranks run in sessions of their own
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    return Stopped(proc.returncode, out, "".join(before) + err, traces / "06_ddp_training_step")


@pytest.mark.slow
def test_a_ctrl_c_to_torchrun_keeps_each_rank_s_trace_whole(ddp):
    traces = sorted(ddp.folder.glob("*.json"))
    assert [re.findall(r"_rank(\d)_", t.name) for t in traces] == [["0"], ["1"]], ddp.err[-3000:]
    assert sorted(Path(name).suffix for name in visible(ddp.folder)) == [".json", ".json", ".txt", ".txt"]
    assert hidden(ddp.folder) == []
    for trace in traces:
        assert trace.with_suffix(".txt").read_text().startswith("stopped by Ctrl-C after ")


@pytest.mark.slow
def test_a_ctrl_c_to_torchrun_stops_every_rank_after_the_same_step(ddp):
    kept = [len(read_trace(t).steps) for t in sorted(ddp.folder.glob("*.json"))]
    notes = [STOPPED.findall(" ".join(read_trace(t).notes)) for t in sorted(ddp.folder.glob("*.json"))]
    assert len(kept) == 2 and kept[0] == kept[1] and DDP_MARK - 3 <= kept[0] < 100_000, kept
    assert notes == [[("Ctrl-C", f"{kept[0]:,}", "100,000")]] * 2, notes


@pytest.mark.slow
def test_a_ctrl_c_to_torchrun_ends_the_ranks_before_its_shutdown_kills_them(ddp):
    # torchrun, signalled, prints no box of the ranks' exit codes: it raises SignalException (exit 1) once they end
    assert "Unable to shutdown process" not in ddp.err, ddp.err[-3000:]  # no rank waited for torchrun's SIGKILL
    assert ddp.code == 1 and "SignalException: Process" in ddp.err and "got signal: 2" in ddp.err
    assert (
        "interrupted" in ddp.err.splitlines()
        and "Ctrl-C: stopping every rank after this step or the next (step " in ddp.err
    )


@pytest.mark.slow
def test_a_ctrl_c_to_one_rank_stops_both_after_the_same_step_exiting_130(tmp_path):
    proc, _ = start_06(tmp_path)
    ranks_of = {}
    for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        ranks_of[next(v for v in environ if v.startswith(b"RANK="))] = int(pid)
    os.kill(ranks_of[b"RANK=1"], signal.SIGINT)  # rank 0 gets no signal: only rank 1's request through the store
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    traces = sorted((tmp_path / "06_ddp_training_step").glob("*.json"))
    kept = [len(read_trace(t).steps) for t in traces]
    assert len(kept) == 2 and kept[0] == kept[1], err[-3000:]
    assert "stopped by Ctrl-C after" in out  # rank 0 stopped as if signalled, and said so
    assert "SIGTERM: stopping" not in err  # torchrun's SIGTERM to rank 0, once rank 1 is gone, finds it stopping
    assert re.findall(r"^\s+exitcode\s*:\s*(\d+)", err, re.M) == ["130", "130"], err[-3000:]  # torchrun's box


# Hundreds of recorded steps: torch's parse of their events (prof.events(), for key_averages) took a stopped rank
# longer than torchrun waits before it kills the ranks (4 minutes for 1,000 steps); the suite's reading of the
# exported trace takes seconds (common.harness.trace_table)
MANY_MARK = 502  # 500 profiled steps
MANY_GRACE_S = 40


@pytest.mark.slow
def test_a_ctrl_c_to_torchrun_after_500_steps_keeps_both_traces_within_its_grace(tmp_path):
    if not torchrun.grace_settable():
        pytest.skip("this torch's torchrun has no --shutdown-timeout (torch 2.12 on)")
    proc, before = start_06(tmp_path, MANY_MARK, MANY_GRACE_S)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    folder = tmp_path / "06_ddp_training_step"
    assert "Unable to shutdown process" not in err, err[-3000:]  # torchrun did not have to kill a rank
    traces = sorted(folder.glob("*.json"))
    kept = [len(read_trace(t).steps) for t in traces]
    assert len(kept) == 2 and kept[0] == kept[1] >= MANY_MARK - 3, err[-3000:]
    assert hidden(folder) == []
    for trace in traces:  # each .txt: the stop, the table's origin, then torch's table of the rank's CPU ops
        lines = trace.with_suffix(".txt").read_text().splitlines()
        assert lines[0] == f"stopped by Ctrl-C after {kept[0]:,} of 100,000 profiled steps"
        assert lines[1].startswith("CPU times summed by the suite from the trace's events")
        assert any(line.split()[:1] == ["train_step"] and line.split()[-1] == str(kept[0])
                   for line in lines), lines[:30]  # fmt: skip


@pytest.mark.slow
def test_a_ctrl_c_whose_write_may_outlast_torchrun_s_grace_says_so_at_once(tmp_path):
    if not torchrun.grace_settable():
        pytest.skip("this torch's torchrun has no --shutdown-timeout (torch 2.12 on)")
    proc, _ = start_06(tmp_path, 302, grace_s=1)  # 300 steps recorded, torchrun's grace 1 s
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    said = [line for line in err.splitlines() if line.startswith("  the trace may take about ")]
    assert len(said) == 1 and "s to write, more than the 1 s torchrun waits before it kills its ranks" in said[0], err
    after = err.splitlines()[err.splitlines().index(said[0]) + 1]
    how = r"  \(their traces lost\); next time: torchrun --shutdown-timeout \d+ \.\.\., or stop one rank: "
    how += "kill -INT <its pid>"
    assert re.fullmatch(how, after), after


def agreeing(steps: list[int]) -> list[ranks.StopTogether]:
    """A StopTogether per rank over one in-process store, each rank in step `steps[rank]` when asked."""
    import torch.distributed as dist

    store = dist.HashStore()
    peers = [ranks.StopTogether(store, store, rank, len(steps)) for rank in range(len(steps))]
    for peer, step in zip(peers, steps, strict=True):
        peer.on_request = lambda _signum, step=step: step
    return peers


def test_the_ranks_stop_after_the_largest_step_any_rank_is_in():
    peers = agreeing([5, 6])  # rank 1 a step ahead: rank 0 must run step 6 too, or rank 1 waits in its all-reduce
    peers[0].ask(signal.SIGINT)  # only rank 0 got the signal
    assert [peer.stop_step(step) for peer, step in zip(peers, [5, 6], strict=True)] == [6, 6]
    assert peers[1].signum == signal.SIGINT  # rank 1 stops as if it had been signalled too


def test_a_rank_whose_peers_never_answer_stops_after_its_own_step(monkeypatch):
    monkeypatch.setattr(ranks, "AGREE_S", 0.0)
    peers = agreeing([5, 6])
    peers[1].on_request = lambda _signum: None  # rank 1 is past its loop: it proposes nothing
    peers[0].ask(signal.SIGTERM)
    assert peers[0].stop_step(5) == 5


def test_a_rank_that_wrote_its_stopped_trace_exits_only_once_every_rank_has():
    # torchrun SIGTERMs the other ranks once one exits: to a rank still writing, a second signal that keeps nothing
    import threading

    peers = agreeing([5, 5])
    first = threading.Thread(target=peers[0].saved)
    first.start()
    first.join(0.5)
    waited = first.is_alive()  # rank 1 is still writing: rank 0 has not exited
    peers[1].saved()
    first.join(HANG_GUARD_S)
    assert waited and not first.is_alive()


def test_a_rank_waits_for_the_others_traces_only_so_long():
    peers = agreeing([5, 5])
    peers[0].saved(wait_s=0.0)  # rank 1 never writes (it failed): rank 0 exits all the same
    assert peers[0].store.check(["saved0"]) and not peers[0].store.check(["saved1"])


def test_a_signal_landing_after_the_step_end_s_look_waits_for_the_next_step_end(monkeypatch):
    # CI once kept no trace: the signal came between step_ends' look (none waiting) and its take, which then raised
    # it with no stop noted, so rec.save wrote nothing. Now only the signal looked at is taken.
    from types import SimpleNamespace

    from common import interrupts
    from common.harness import recording

    monkeypatch.setattr(interrupts._state, "installed", True)
    monkeypatch.setattr(interrupts._state, "taken", False)
    monkeypatch.setattr(interrupts._state, "pending", None)
    monkeypatch.setattr(interrupts._state, "first", None)
    rec = SimpleNamespace(step_started=None, together=None, holding=True, stop=None, writing=False)

    def look() -> None:  # the look finds none; the signal lands right after it
        interrupts._state.pending = signal.SIGINT

    monkeypatch.setattr(recording, "signal_waiting", lambda: look())
    prof = SimpleNamespace(current_action=torch.profiler.ProfilerAction.RECORD)
    recording.Recording.step_ends(rec, prof)  # raised Interrupted here before, with rec.stop still None
    assert rec.stop is None and interrupts._state.pending == signal.SIGINT  # taken, noted, at the next step's end


def test_a_signal_taken_at_a_step_end_is_acknowledged_before_torch_collects(monkeypatch, capfd):
    # On an H100 the line came 2.3-5.4 s late in 4 of 5 trials: the watchdog needs the GIL to print it, and the main
    # thread had gone on from the step's end into torch's collection of the events, which holds the GIL for seconds.
    from types import SimpleNamespace

    from common import interrupts
    from common.cli import Interrupted
    from common.harness import recording

    monkeypatch.setattr(interrupts._state, "installed", True)
    monkeypatch.setattr(interrupts._state, "taken", False)
    monkeypatch.setattr(interrupts._state, "pending", signal.SIGINT)  # the handler ran; the watchdog has not
    monkeypatch.setattr(interrupts._state, "first", signal.SIGINT)
    monkeypatch.setattr(interrupts._state, "acknowledged", False)
    rec = SimpleNamespace(step_started=None, together=None, holding=True, stop=None, writing=False)
    rec.step_number = lambda prof: "step 7 of 100"
    monkeypatch.setattr(interrupts._state, "acknowledge", lambda signum: f"Ctrl-C: stopping after ({rec.stop_step})")
    prof = SimpleNamespace(current_action=torch.profiler.ProfilerAction.RECORD)
    with pytest.raises(Interrupted):
        recording.Recording.step_ends(rec, prof)
    assert capfd.readouterr().err == "Ctrl-C: stopping after (step 7 of 100)\n"
    interrupts._acknowledge(signal.SIGINT)  # the watchdog, getting the GIL at last, says nothing more
    assert capfd.readouterr().err == ""
