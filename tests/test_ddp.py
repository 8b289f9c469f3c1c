"""06_ddp_training_step.py on the CPU: two gloo ranks under torchrun, a trace each, read together by the summary."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT, command, ev, load_script, usage_error

from common import diff, summary
from common.ddp import bucket_count
from common.private_api import ddp_bucket_caps
from common.trace import parse, read_trace

TINY = ["--batch", "2", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64", "--dtype", "fp32"]


def torchrun(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(ROOT / "06_ddp_training_step.py"), *TINY, *flags, "--device", "cpu", "--traces-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    done = torchrun(folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder / "06_ddp_training_step", done.stdout


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
    assert out.count("checked guesses match the trace") == 2


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
    headline = out.split("\n\n")[1]
    assert code == 0 and headline.strip() and "allreduce" in out


def test_a_small_bucket_cap_gives_the_guessed_number_of_all_reduces(tmp_path):
    done = torchrun(tmp_path, "--bucket-cap-mb", "0.01")  # 10 KiB buckets: the first one too, on this torch
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for path in (tmp_path / "06_ddp_training_step").glob("*.json"):
        trace = read_trace(path)
        assert trace.meta["all_reduces"] > 1
        assert {s.cpu_ops["c10d::allreduce_"] for s in trace.steps} == {trace.meta["all_reduces"]}


def test_not_started_by_torchrun_is_one_line(capsys, monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    err = usage_error(lambda: load_script("06_ddp_training_step").main([*TINY, "--device", "cpu"]), capsys)
    assert "torchrun --nproc-per-node 2" in err


def test_a_world_of_one_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    err = usage_error(lambda: load_script("06_ddp_training_step").main([*TINY, "--device", "cpu"]), capsys)
    assert "at least 2 processes" in err


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
