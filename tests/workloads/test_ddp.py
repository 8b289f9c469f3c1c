"""06_ddp_training_step.py on the CPU: gloo ranks under torchrun (two, and one), a trace each, read together by
the summary; what the ranks print, and how a refusal, a signal or a lost launcher ends them."""

from __future__ import annotations

import ast
import inspect
import os
import re
import signal
import socket
import subprocess
import sys

import pytest
from helpers import PYTHON, ROOT, command, diff_parts, docs_text, ev, load_script, requires_cuda, usage_error

from common.analysis import diff, summary
from common.harness.private_api import ddp_bucket_caps
from common.reader.build import parse, read_trace
from common.workloads.block import block_reference
from common.workloads.ddp import bucket_count

TINY = ["--batch", "2", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64", "--dtype", "fp32"]
HUGE = ["--dim", "65536", "--heads", "64", "--hidden", "262144"]  # 05 refuses it anywhere: about 1.6 TB
LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
WIDTH = 120
# The module fixtures that start torchrun: every test that reads one is slow (tests/conftest.py)
SLOW_FIXTURES = {"two_ranks", "no_overlap", "one_rank", "refused", "long_run"}
TORCHRUN = "uv run torchrun --standalone --nproc-per-node"  # how every printed command starts 06


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER and not k.startswith("TORCHELASTIC")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def torchrun_argv(tmp_path, *flags: str, nproc: int = 2, tiny: bool = True, device: str = "cpu") -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            str(ROOT / "06_ddp_training_step.py"), *(TINY if tiny else []), *flags, "--device", device,
            "--traces-dir", str(tmp_path)]  # fmt: skip


def torchrun(
    tmp_path, *flags: str, nproc: int = 2, tiny: bool = True, device: str = "cpu"
) -> subprocess.CompletedProcess:
    return subprocess.run(
        torchrun_argv(tmp_path, *flags, nproc=nproc, tiny=tiny, device=device),
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def ranks_lines(done: subprocess.CompletedProcess) -> list[str]:
    """What the ranks printed: every line but torchrun's own (its log lines, its traceback and its box)."""
    text = done.stdout + done.stderr
    text = text.split("Traceback (most recent call last):")[0]
    return [line for line in text.splitlines() if not re.match(r"[WEI]\d{4} ", line)]


def rank_1_beyond_verdict(out: str) -> list[str]:
    """What rank 1 printed besides its verdict. Which of two tiny gloo ranks waits for the other's all-reduce is
    the run's timing (CI saw rank 1 communication-bound where rank 0 was not), so a rank's verdict may differ from
    rank 0's and is then said (ranks._Voice.say_differences); its guesses, its checks and its table may not."""
    lines, in_verdict = [], False
    for line in out.splitlines():
        if not line.startswith("[rank 1]"):
            continue
        said = line.removeprefix("[rank 1] ")
        in_verdict = said.startswith("verdict:") or (in_verdict and said.startswith(" " * 6))
        if not in_verdict:
            lines.append(line)
    return lines


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    done = torchrun(folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder / "06_ddp_training_step", done.stdout


@pytest.mark.slow
def test_each_rank_writes_its_own_trace_that_carries_its_rank(two_ranks):
    folder, _ = two_ranks
    traces = sorted(folder.glob("*.json"))
    assert [p.name.rsplit("_", 1)[-1] for p in traces] == ["rank0.json", "rank1.json"]
    for rank, path in enumerate(traces):
        trace = read_trace(path)
        assert trace.rank == rank and trace.distributed["world_size"] == 2 and trace.distributed["backend"] == "gloo"
        assert trace.meta["rank"] == rank and trace.meta["world_size"] == 2
        assert trace.phases[:3] == ["forward", "backward", "optimizer"]


def test_every_rank_does_the_guessed_all_reduces_per_step(two_ranks):
    folder, out = two_ranks
    for path in folder.glob("*.json"):
        trace = read_trace(path)
        assert {s.cpu_ops["c10d::allreduce_"] for s in trace.steps} == {trace.meta["all_reduces"]}
    # rank 1's guesses are the same, so it says none of them; only its verdict may differ (rank_1_beyond_verdict)
    assert out.count("checked guesses match the trace") == 1 and rank_1_beyond_verdict(out) == []


def test_the_summary_of_the_folder_has_a_row_per_rank_and_the_spread(two_ranks, capsys):
    folder, _ = two_ranks
    code, out, _ = command(summary.main, capsys, folder)
    assert code == 0
    rows = [line for line in out.splitlines() if line.strip().startswith(("0 ", "1 "))]
    assert len(rows) == 2 and "spread, slowest ÷ fastest rank" in out


@pytest.fixture(scope="module")
def no_overlap(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp-no-overlap")
    done = torchrun(folder, "--no-overlap")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder / "06_ddp_training_step"


@pytest.mark.slow
def test_without_overlap_one_all_reduce_follows_the_backward(no_overlap):
    for path in no_overlap.glob("*.json"):
        trace = read_trace(path)
        assert trace.phases == ["forward", "backward", "allreduce", "optimizer"]
        for step in trace.steps:
            assert step.cpu_ops["c10d::allreduce_"] == 1 and step.phase("allreduce").cpu_ops["c10d::allreduce_"] == 1
            assert step.phase("backward").cpu_ops["c10d::allreduce_"] == 0


def test_the_diff_of_overlap_against_no_overlap_leads_with_one_headline(two_ranks, no_overlap, capsys):
    overlap = next(two_ranks[0].glob("*rank0.json"))
    code, out, _ = command(diff.main, capsys, overlap, next(no_overlap.glob("*rank0.json")))
    bounds, _, headline = diff_parts(out)
    assert code == 0 and bounds[0].startswith("bound: ") and headline and "allreduce" in out


@pytest.mark.slow
def test_a_small_bucket_cap_gives_the_guessed_number_of_all_reduces(tmp_path):
    done = torchrun(tmp_path, "--bucket-cap-mb", "0.01")  # 10 KiB buckets: the first one too, on this torch
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for path in (tmp_path / "06_ddp_training_step").glob("*.json"):
        trace = read_trace(path)
        assert trace.meta["all_reduces"] > 1
        assert {s.cpu_ops["c10d::allreduce_"] for s in trace.steps} == {trace.meta["all_reduces"]}


def test_not_started_by_torchrun_is_one_line_with_the_command_that_starts_it(capsys, monkeypatch):
    for name in LAUNCHER:
        monkeypatch.delenv(name, raising=False)
    err = usage_error(lambda: load_script("06_ddp_training_step").main([*TINY, "--device", "cpu"]), capsys)
    assert "uv run torchrun --standalone --nproc-per-node 2 06_ddp_training_step.py [flags]" in err


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp-one")
    done = torchrun(folder, nproc=1)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder / "06_ddp_training_step", done.stdout


AGREED_REFUSAL = """
import os, signal
import torch.distributed as dist
from common.cli import SuiteError
from common.harness.ranks import one_verdict
from common.harness.torchrun import Launch
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
try:
    with one_verdict(Launch(rank=0, local_rank=0, world_size=1, local_world_size=1)):
        raise SuiteError("the shape does not fit")
except SuiteError:
    os.kill(os.getpid(), signal.SIGTERM)  # torchrun's, once another rank that refused alike has exited
    signal.pause()
"""


@pytest.mark.slow  # a fresh interpreter imports torch and starts gloo
def test_a_rank_killed_after_agreeing_to_refuse_exits_2_not_minus_15():
    """torchrun sends SIGTERM to the other ranks as soon as one exits; a rank between the agreement and its own
    exit ended by the signal (-15 in torchrun's list, 1 run in 5) where it exits 2 like the rank that said it."""
    done = subprocess.run([*PYTHON, "-c", AGREED_REFUSAL], cwd=ROOT, env=clean_env(), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]


@pytest.mark.slow
def test_fp16_on_the_cpu_trains_without_nan_weights_and_its_check_passes(tmp_path):
    """AdamW's default eps of 1e-8 is 0 in fp16: where a gradient squared underflows, its update was 0/0 and every
    weight NaN after the first step, so the check failed after the whole run (issue 36 item 3)."""
    done = torchrun(tmp_path, "--dtype", "fp16")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "matches the reference" in done.stdout and "nan" not in done.stdout


@pytest.mark.slow
def test_a_world_of_one_runs_ddp_and_says_what_one_rank_cannot_show(one_rank):
    folder, out = one_rank
    (path,) = folder.glob("*_rank0.json")
    trace = read_trace(path)
    assert trace.meta["world_size"] == 1 and {s.cpu_ops["c10d::allreduce_"] for s in trace.steps} == {1}
    (line,) = [line for line in out.splitlines() if line.strip().startswith("one rank:")]
    assert "no communication exposed" in line and len(line) <= WIDTH
    assert "checked guesses match the trace" in out


@pytest.mark.gpu
@requires_cuda
def test_gpu_a_world_of_one_runs_on_nccl_with_no_nccl_kernel(tmp_path):
    done = torchrun(tmp_path, "--strict", nproc=1, tiny=False, device="cuda:0")  # the default shape; a miss: rc 1
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "data parallel: 1 rank, nccl" in done.stdout and "checked guesses match the trace" in done.stdout
    (path,) = (tmp_path / "06_ddp_training_step").glob("*_rank0.json")
    trace = read_trace(path)
    assert trace.distributed["backend"] == "nccl" and trace.distributed["world_size"] == 1
    assert all(s.cpu_ops["c10d::allreduce_"] == trace.meta["all_reduces"] for s in trace.steps)


@pytest.mark.parametrize(
    "env, said",
    [
        ({"RANK": "5", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK=5 with WORLD_SIZE=2: the ranks are 0 to 1"),
        ({"RANK": "-1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK=-1 with WORLD_SIZE=2"),
        ({"RANK": "0", "WORLD_SIZE": "0", "LOCAL_RANK": "0"}, "WORLD_SIZE=0: a world has at least 1 rank"),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK=2 with 2 rank"),
        ({"RANK": "one", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK='one' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "start it with torchrun"),
        ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, "MASTER_ADDR and MASTER_PORT are not both set"),
    ],
)
def test_launcher_variables_that_cannot_be_right_are_one_line_before_start_up(capsys, monkeypatch, env, said):
    for name in LAUNCHER:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    err = usage_error(lambda: load_script("06_ddp_training_step").main([*TINY, "--device", "cpu"]), capsys)
    assert said in err


@pytest.mark.parametrize("cap", ["1e13", "nan", "inf", "-1", "0", "lots"])
def test_a_bucket_cap_ddp_cannot_take_is_one_line(capsys, monkeypatch, cap):
    for name in LAUNCHER:
        monkeypatch.delenv(name, raising=False)
    argv = [*TINY, "--device", "cpu", "--bucket-cap-mb", cap]
    err = usage_error(lambda: load_script("06_ddp_training_step").main(argv), capsys)
    assert "DDP takes a bucket above 0 and up to 8.8e+12 MiB" in err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank0_of_two(tmp_path, *flags: str) -> subprocess.Popen:
    """Rank 0 of a world of 2 started by hand, whose rank 1 never comes."""
    env = clean_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    argv = [*PYTHON, str(ROOT / "06_ddp_training_step.py"), *TINY, "--device", "cpu", *flags]
    return subprocess.Popen([*argv, "--traces-dir", str(tmp_path)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


@pytest.mark.slow
def test_a_start_up_that_times_out_names_the_ranks_it_waited_for(tmp_path):
    proc = rank0_of_two(tmp_path, "--startup-timeout", "3")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, out + err
    assert err.strip() == "error: start-up: waited 3 s for rank(s) 1 of 2 to join " + (
        "(the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT on every rank?)"
    )


@pytest.mark.slow
def test_a_rank_waiting_in_start_up_ends_on_sigterm(tmp_path):
    proc = rank0_of_two(tmp_path, "--startup-timeout", "600")
    for line in proc.stdout:
        if line.startswith("start-up: waiting up to 600 s for rank(s) 1"):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signal.SIGTERM and err.strip() == "interrupted", out + err


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """Two ranks asked for a shape no machine here holds: about 1.6 TB."""
    return torchrun(tmp_path_factory.mktemp("ddp-refused"), *HUGE, tiny=False)


@pytest.mark.slow
def test_a_shape_05_refuses_is_refused_by_every_rank_before_it_allocates(refused, tmp_path, capsys):
    err = usage_error(lambda: load_script("05_training_step").main([*HUGE, "--device", "cpu", "--traces-dir",
                                                                        str(tmp_path)]), capsys)  # fmt: skip
    assert err.startswith("error: these shapes need about")
    errors = [line for line in ranks_lines(refused) if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("error: these shapes need about"), ranks_lines(refused)
    assert "allocation" not in refused.stdout + refused.stderr


def test_a_refusal_ends_torchrun_s_report_with_the_rank_s_line_and_one_exit_code(refused):
    (line,) = [line for line in ranks_lines(refused) if line.startswith("error:")]
    box = refused.stderr.split("Root Cause (first observed failure):")[1]
    assert box.strip().splitlines()[-2].strip() == f"traceback : {line}"
    assert re.findall(r"exitcode  : (-?\d+)", refused.stderr) == ["2", "2"]


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """One rank at the default shape, --batch 32 and 60 profiled steps: long on any CPU short of one about 7x this
    machine's (442 s estimated at a measured 379 GFLOP/s in bf16 and 6 µs an op; --batch 32 alone came in at 34 s,
    under the estimate's LONG_S, once the estimate read measured rates and dropped 06's reference): what it says
    before its first step and once its first call has checked the estimate (the cheaper command), then its
    launcher is killed (SIGKILL, no chance to pass anything on) and the rank's last
    words are read until it is gone."""
    folder = tmp_path_factory.mktemp("ddp-long")
    argv = torchrun_argv(folder, "--batch", "32", "--active", "60", nproc=1, tiny=False)
    proc = subprocess.Popen(argv, cwd=ROOT, env=clean_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    before: list[str] = []
    for line in proc.stdout:
        before.append(line.rstrip("\n"))
        if line.startswith("error:"):
            break
        if "that is long;" in before[-1] and "instead:" in before[-1] and not before[-1].endswith(("instead:", " \\")):
            break  # the cheaper command said (after the first call checked the estimate), on this line
        if line.startswith("... ") and any(x.startswith("estimate checked:") for x in before):
            break  # checked, and no cheaper command came
        if len(before) > 1 and before[-2].endswith(" \\") and not before[-1].endswith(" \\"):
            break
    proc.kill()  # torchrun only: its rank is left without its launcher
    proc.wait()
    after = proc.stdout.read()  # until the rank, the last writer of the pipe, is gone
    return before, after


@pytest.mark.slow
def test_the_cheaper_command_of_a_long_run_starts_with_uv_run_torchrun(long_run):
    before, _ = long_run
    said = before[next(i for i, line in enumerate(before) if line.startswith("  that is long;")) :]
    assert all(len(line) <= 120 for line in said), said
    command = " ".join(line.strip().removesuffix(" \\") for line in said).split("instead: ")[-1].strip()
    assert command.startswith(f"{TORCHRUN} 1 06_ddp_training_step.py") and re.search(r"--batch \d+$", command)


@pytest.mark.slow
def test_a_rank_ends_when_its_launcher_is_killed(long_run):
    before, after = long_run
    assert after.strip().splitlines()[-1:] == ["interrupted"], (before, after)


EXIT_RANK = """
import atexit, sys
from common.harness.torchrun import exit_rank
atexit.register(lambda: print("the interpreter's teardown ran"))
print("the rank's report")  # still in the buffer of a piped stdout
def main():
    if sys.argv[1] == "raise":
        raise SystemExit(2)  # a refusal, as cli makes it
    return int(sys.argv[1])
exit_rank(main)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("how", "code"), [("0", 0), ("3", 3), ("raise", 2)])
def test_a_rank_ends_with_main_s_code_and_its_output_but_no_interpreter_teardown(how, code):
    """06 ends its process through exit_rank: a gloo worker thread that frees a finished collective's tensors
    while Python shuts down aborts a rank that ran cleanly (SIGABRT, seen in CI), so no rank shuts Python down."""
    done = subprocess.run([sys.executable, "-c", EXIT_RANK, how], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == code, done.stderr
    assert done.stdout == "the rank's report\n"


def test_06_ends_through_exit_rank():
    tree = ast.parse((ROOT / "06_ddp_training_step.py").read_text())
    last = tree.body[-1]
    assert isinstance(last, ast.If) and "exit_rank(main)" in ast.unparse(last.body[0])


def test_every_printed_06_command_starts_with_uv_run_torchrun():
    readme = docs_text()
    doc = load_script("06_ddp_training_step").__doc__
    printed = [
        line.strip() for text in (readme, doc) for line in text.splitlines() if "06_ddp_training_step.py " in line
    ]
    commands = [line for line in printed if re.match(r"(uv run |torchrun|python)", line)]
    assert len(commands) >= 6
    assert all(c.startswith(f"{TORCHRUN} ") for c in commands), [c for c in commands if not c.startswith(TORCHRUN)]


def test_rank_0_prints_the_report_and_another_rank_only_what_differs(two_ranks):
    _, out = two_ranks
    lines = out.splitlines()
    assert sum(line.startswith("[06_ddp_training_step] device=cpu") for line in lines) == 1
    assert sum(line.startswith("check:") for line in lines) == 1 and out.count("guess vs trace") == 1
    assert rank_1_beyond_verdict(out) == []  # rank 1 did what rank 0 did


def test_another_rank_prints_the_lines_whose_words_differ_not_those_whose_figures_do(capsys):
    from common.harness.ranks import _Voice
    from common.harness.torchrun import Launch

    voice = _Voice(Launch(rank=1, local_rank=1, world_size=2, local_world_size=2))
    table = [
        "-" * 30 + "  " + "-" * 12,
        "aten::mm   4.71%   697.816us",
        "-" * 30 + "  " + "-" * 12,
        "Self CPU time total: 1ms",
    ]
    rank0 = ["step time: 3.98 ms CPU", "forward     987 µs  —", "  [ ok ] aten::mm  guess 15  trace 15", *table]
    mine = ["step time: 12.1 ms CPU", "forward    1.07 ms  —", "  [MISS] aten::mm  guess 15  trace 16", *table[:1]]
    mine.append("c10d::allreduce_  8%")
    voice.say_differences([*mine, *table[1:], "... 10.2 s: profiled steps"], rank0)
    assert capsys.readouterr().out.splitlines() == ["[rank 1]   [MISS] aten::mm  guess 15  trace 16"]


def test_another_rank_says_its_verdict_only_when_its_call_differs_from_rank_0_s(capsys):
    """Which op was busiest is the run's timing (two ranks of one step differ in it under load, as CI showed);
    the call before it is the verdict, and a rank whose call differs prints it whole, wrapped lines included."""
    from common.harness.ranks import _Voice
    from common.harness.torchrun import Launch

    voice = _Voice(Launch(rank=1, local_rank=1, world_size=2, local_world_size=2))
    rank0 = [
        "verdict: overhead-bound on the CPU: the busiest op, aten::mm, is 20% of the step at 1.2 GFLOP/s, the rest",
        "      dispatch and Python; 9.8 ms of CPU per step",
        "  rule: a rule → its fix",
    ]
    same_call = [
        "verdict: overhead-bound on the CPU: the busiest op, c10d::allreduce_, is 36% of the step at 0.468 GFLOP/s,",
        "      the rest dispatch and Python; 12.1 ms of CPU per step",
        "  rule: a rule → its fix",
        "  rule: another rule → its fix",
    ]
    voice.say_differences(same_call, rank0)
    assert capsys.readouterr().out.splitlines() == ["[rank 1]   rule: another rule → its fix"]
    other_call = [
        "verdict: compute-bound on the CPU: 81% of the step inside aten::mm; 12.1 ms",
        "      of CPU per step",
    ]
    voice.say_differences(other_call, rank0)
    assert capsys.readouterr().out.splitlines() == [f"[rank 1] {line}" for line in other_call]


def test_the_check_line_reads_as_a_sentence(two_ranks):
    _, out = two_ranks
    assert "check: rank 1's out_proj weight (rank 0's is the reference) matches the reference (max |diff| 0," in out


def test_setup_says_the_cpu_threads_torchrun_gave_each_rank_within_120_columns(two_ranks):
    _, out = two_ranks
    (line,) = [line for line in out.splitlines() if line.startswith("data parallel:")]
    assert line.startswith("data parallel: 2 ranks, gloo, OMP_NUM_THREADS=1 per rank (torchrun's default")
    assert len(line) <= WIDTH


BLOCK_CLASSES = ("RMSNorm", "CausalSelfAttention", "SimpleGeGLUMLP", "DecoderBlock")


def class_source(script: str, name: str) -> str:
    tree = ast.parse((ROOT / f"{script}.py").read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return ast.dump(node, include_attributes=False)


@pytest.mark.parametrize("name", BLOCK_CLASSES)
def test_06_s_decoder_block_is_05_s_line_for_line(name):
    assert class_source("06_ddp_training_step", name) == class_source("05_training_step", name)


def test_block_reference_reads_parameters_and_attributes_both_blocks_have():
    import torch

    source = inspect.getsource(block_reference)
    read = set(re.findall(r'w\["([\w.]+)"\]', source))
    attributes = set(re.findall(r"block\.(\w+\.\w+)\b", source))
    assert read and attributes == {"attn.heads", "attn_norm.eps"}
    for script in ("05_training_step", "06_ddp_training_step"):
        block = load_script(script).DecoderBlock(32, 2, 64)
        assert read == {name for name, _ in block.named_parameters()}, script
        for attribute in attributes:
            part, field = attribute.split(".")
            assert isinstance(getattr(getattr(block, part), field), (int, float)), (script, attribute)
        x = torch.randn(1, 4, 32)
        torch.testing.assert_close(block_reference(block, x, torch.float32).float(), block(x), rtol=1e-4, atol=1e-4)


def test_buckets_are_counted_as_ddp_fills_them():
    import torch

    params = [torch.nn.Parameter(torch.zeros(n)) for n in (300_000, 300_000, 300_000)]  # 1.2 MB each in fp32
    mib = 1 << 20
    assert bucket_count(params, first_cap=mib, cap=25 * mib) == 2  # the first closes at 1 MiB, the rest fit in 25
    assert bucket_count(params, first_cap=25 * mib, cap=25 * mib) == 1
    assert bucket_count(params, first_cap=mib // 2, cap=mib // 2) == 3


def test_ddp_left_at_its_default_caps_its_first_bucket_at_1_mib_and_the_rest_at_25(tmp_path):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.FileStore(str(tmp_path / "store"), 1))
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        assert ddp_bucket_caps(model) == (1 << 20, 25 << 20)
    finally:
        dist.destroy_process_group()


def test_exposed_communication_is_the_nccl_time_no_compute_kernel_hides():
    trace = parse(
        {
            "traceEvents": [
                ev("user_annotation", "ProfilerStep#0", 0, 1000),
                ev("cuda_runtime", "cudaLaunchKernel", 10, 1, correlation=1),
                ev("cuda_runtime", "cudaLaunchKernel", 20, 1, correlation=2),
                ev("cuda_runtime", "cudaLaunchKernel", 30, 1, correlation=3),
                ev("kernel", "ampere_sgemm_128x64_nn", 100, 100, tid=7, correlation=1),  # compute 100-200
                ev("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 150, 100, tid=8, correlation=2),  # 150-250
                ev("kernel", "elementwise_kernel", 220, 10, tid=7, correlation=3),  # compute 220-230
            ]
        }
    )
    step = trace.steps[0]
    assert step.exposed_communication_us == pytest.approx(100 - 50 - 10)  # 150-200 and 220-230 hidden


@pytest.mark.slow
def test_runs_of_one_and_two_ranks_with_the_same_flags_sit_side_by_side(tmp_path, capsys):
    """A one-rank run wrote the same tag as rank 0 of a two-rank run and replaced its trace; the world size is in
    the tag now, so both runs stay whole and the summary reads them as two runs."""
    for nproc in (2, 1):
        done = torchrun(tmp_path, nproc=nproc)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    folder = tmp_path / "06_ddp_training_step"
    names = sorted(p.name for p in folder.glob("*.json"))
    assert len(names) == 3, names
    assert sum("_2ranks_" in n for n in names) == 2 and [n for n in names if "_1rank_" in n][0].endswith("_rank0.json")
    code, out, _ = command(summary.main, capsys, folder)
    titles = [line for line in out.splitlines() if line.startswith("Ranks of ")]
    assert code == 0 and len(titles) == 1 and "(2 ranks)" in titles[0]  # the one-rank run is no rank table
