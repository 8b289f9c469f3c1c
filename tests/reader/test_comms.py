"""The reader's collectives (common.reader.comms): kinds, message sizes and durations, on a real H200 trace of one
NCCL rank, on two gloo ranks of 06, and on synthetic traces."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from helpers import ROOT, comms_trace

from common.reader.build import parse, read_trace
from common.reader.comms import Collective

FOREIGN = ROOT / "tests" / "fixtures" / "foreign"
GLOO = ROOT / "tests" / "fixtures" / "ddp_gloo"
KINDS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]


def test_the_h200_trace_issues_eight_collectives_a_step_at_4_and_64_mib():
    trace = read_trace(FOREIGN / "collectives.json.gz")
    per_step = Counter()
    for c in trace.collectives:
        per_step[next(s.number for s in trace.steps if s.start_us <= c.issued_us <= s.start_us + s.dur_us)] += 1
    assert list(per_step.values()) == [8, 8, 8]
    assert [c.kind for c in trace.collectives[:8]] == KINDS * 2
    assert [c.bytes for c in trace.collectives[:8]] == [4 << 20] * 4 + [64 << 20] * 4
    assert {(c.group, c.group_size, c.dtype) for c in trace.collectives} == {("0", 1, "Float")}


def test_one_nccl_rank_times_all_gather_and_reduce_scatter_by_their_dtod_memcpy():
    trace = read_trace(FOREIGN / "collectives.json.gz")
    copies = sorted(op.us for s in trace.steps for op in s.memcpy)
    timed = [c for c in trace.collectives if c.us is not None]
    assert {c.kind for c in timed} == {"all_gather", "reduce_scatter"} and {c.where for c in timed} == {"GPU"}
    assert sorted(c.us for c in timed) == pytest.approx(copies)


def test_a_collective_that_ran_no_work_has_no_duration():
    trace = read_trace(FOREIGN / "collectives.json.gz")  # NCCL's one-rank all_reduce and broadcast return at once
    idle = [c for c in trace.collectives if c.kind in ("all_reduce", "broadcast")]
    assert len(idle) == 12 and all(c.us is None and c.where is None for c in idle)


def test_a_trace_without_record_param_comms_has_kinds_and_no_size():
    trace = read_trace(sorted(GLOO.glob("*rank0.json.gz"))[0])
    assert len(trace.collectives) == 12 and {c.kind for c in trace.collectives} == {"all_reduce"}
    assert all(c.bytes is None and c.group_size is None for c in trace.collectives)


def test_gloo_collectives_are_timed_by_their_worker_s_label():
    path = sorted(GLOO.glob("*rank0.json.gz"))[0]
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    labels = sorted(e["dur"] for e in events if e.get("name") == "gloo:all_reduce")
    trace = read_trace(path)
    assert {c.where for c in trace.collectives} == {"CPU"}
    assert sorted(c.us for c in trace.collectives) == labels


def test_the_nccl_kernel_launched_inside_a_collective_s_span_times_it():
    [first, *_] = parse(comms_trace(0, 2)).collectives
    assert (first.where, first.us, first.start_us) == ("GPU", 100, 120)


@pytest.mark.parametrize(
    ("kind", "n", "factor"),
    [("all_reduce", 8, 1.75), ("all_gather", 8, 0.875), ("reduce_scatter", 8, 0.875), ("all_to_all", 4, 0.75),
     ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("send", 2, 1.0), ("all_reduce", 1, None), ("barrier", 8, None),
     ("all_reduce", None, None)],
)  # fmt: skip
def test_the_bus_bandwidth_factor_is_nccl_tests_for_each_kind(kind, n, factor):
    assert Collective(kind, 0.0, 1.0, 1, group_size=n).bus_factor == factor


def test_a_message_is_the_larger_of_input_and_output_in_the_dtype_s_bytes():
    args = {"Collective name": "_allgather_base", "In msg nelems": 1024, "Out msg nelems": 4096, "Group size": 4,
            "dtype": "BFloat16", "Process Group Name": "7"}  # fmt: skip
    [first, *_] = parse(comms_trace(0, 4, calls=[args])).collectives
    assert (first.kind, first.bytes, first.group, first.group_size) == ("all_gather", 8192, "7", 4)


@pytest.mark.parametrize(
    "change",
    [{"dtype": "Quux"}, {"In msg nelems": True, "Out msg nelems": True}, {"In msg nelems": -1, "Out msg nelems": -1},
     {"In msg nelems": 1e400, "Out msg nelems": "1"}, {"In msg nelems": 10**400, "Out msg nelems": None}],
    ids=["unknown dtype", "bools", "negative", "not whole", "too large"],
)  # fmt: skip
def test_args_that_are_no_figure_give_no_size_never_a_guess(change):
    args = {"Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": 8, "Group size": 2,
            "dtype": "Float", "Process Group Name": "0", **change}  # fmt: skip
    trace = parse(json.loads(json.dumps(comms_trace(0, 2, calls=[args]))))
    assert trace.collectives and all(c.bytes is None for c in trace.collectives)


def test_ddps_bucket_all_reduces_on_the_h200_add_up_to_the_parameters_bytes():
    """06 on the H200 (torch 2.11, one NCCL rank, --bucket-cap-mb 25, `--strict` passed): DDP all-reduces its 3
    gradient buckets a step, whose sizes add up to the block's 9,438,720 fp32 parameters, 37,754,880 bytes."""
    trace = read_trace(FOREIGN / "ddp_nccl_1rank.json.gz")
    steps = len(trace.steps)
    reduces = [c for c in trace.collectives if c.kind == "all_reduce"]
    assert len(reduces) == 3 * steps and {c.group_size for c in reduces} == {1}
    assert sum(c.bytes for c in reduces) == 9_438_720 * 4 * steps
    assert all(c.bus_factor in (None, 0.0) for c in reduces)  # one rank moves nothing between ranks
