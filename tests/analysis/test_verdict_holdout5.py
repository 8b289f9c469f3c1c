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
