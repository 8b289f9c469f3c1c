"""Issue 46's holdout5 cases as small synthetic traces: each pins a change of the verdict's model (a GPU run told by
its NCCL labels)."""

from __future__ import annotations

from helpers import ev

from common.analysis.diagnosis import diagnose
from common.reader.build import parse


def test_an_nccl_collective_label_shows_an_unrecorded_gpu():
    """hta_distinfo_missing: a DDP step with cpu_ops and labels only, no distributedInfo; its nccl:all_to_all label
    is NCCL's, which runs on GPUs alone, so the GPU was not recorded: no bound, not 'overhead-bound on the CPU'."""
    events = [ev("user_annotation", "ProfilerStep#5", 0, 10_000)]
    for k in range(20):
        events.append(ev("cpu_op", "aten::add", 100 + 400 * k, 60))
    events += [ev("user_annotation", "nccl:all_to_all", 8_200, 500), ev("cpu_op", "aten::empty", 8_250, 20)]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("no bound: the trace holds no GPU event, yet it ran nccl:all_to_all"), line


def _launched(t: float, name: str, us: float, corr: int, gpu_at: float | None = None, op: str = "") -> list[dict]:
    """A launch at `t` (inside an op `op` where given) of a kernel `name` of `us` µs, run at `gpu_at` (else t + 5)."""
    out = [ev("cpu_op", op, t, 30)] if op else []
    out += [ev("cuda_runtime", "cudaLaunchKernel", t + 1, 4, correlation=corr),
            ev("kernel", name, t + 5 if gpu_at is None else gpu_at, us, tid=7, correlation=corr)]  # fmt: skip
    return out


def test_communication_under_a_host_that_never_waits_is_not_the_bound():
    """dlrm_rank6: the all-to-alls run exposed (26% of the step) while the host dispatches ops the whole step and
    never waits for the GPU: hiding them would not shorten the step, the host is the bound."""
    events = [ev("user_annotation", "ProfilerStep#10", 0, 10_000)]
    for k in range(240):
        events += _launched(20 + 40 * k, "vectorized_elementwise_kernel", 5, k, op="aten::add")
    for j, at in enumerate((1_000, 6_000)):
        comm = ev("kernel", "ncclDevKernel_SendRecv(ncclDevComm*)", at, 1_500, tid=8, correlation=1_000 + j)
        events += [ev("cuda_runtime", "cudaLaunchKernel", at - 20, 4, correlation=1_000 + j), comm]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("bound by the CPU: GPU idle"), line
    assert "its exposed communication" in line, line
