"""Fuzz tests of the trace reader: real fixtures mutated at random, and random hand-made traces, each read by the
summary (`--explain --markdown --per-step`) and the diff in this process. Whatever the input, a command ends with
exit 0 or 2 (never a traceback), prints no raw control character (a name's line break included), and stays within
a generous memory bound. HYPOTHESIS_PROFILE=slow runs many more examples."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT, command, comms_trace, ev, tiny_gpu_trace
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from common.analysis import diff, summary
from common.reader.roofline import ShapedOp, op_work

COMMON = {"deadline": None, "suppress_health_check": list(HealthCheck), "report_multiple_bugs": False}
settings.register_profile("default", max_examples=12, derandomize=True, **COMMON)  # CI: the same cases every run
settings.register_profile("slow", max_examples=400, **COMMON)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
settings.load_profile(PROFILE)
SLOW = PROFILE == "slow"  # the bigger inputs (1 MB names, templates 2,000 deep) only there

SOURCES = [
    FIXTURES / "02_linear" / "1024_32_64_bf16_cold_eager.json.gz",
    FIXTURES / "01_matmul_add" / "64_bf16_cold_eager.json.gz",
    FIXTURES / "04_c_sdpa_attention" / "8_16_1024_64_cudnn_bf16_cold_eager.json.gz",
    FIXTURES / "03_simple_mlp" / "64_128_768_3072_bf16_cold_compiled.json.gz",
    ROOT / "tests" / "fixtures" / "foreign" / "overlapping_streams.json.gz",
    ROOT / "tests" / "fixtures" / "foreign" / "bare_profile.json.gz",
]
DOCS = {path: json.loads(gzip.decompress(path.read_bytes())) for path in SOURCES}
PEAK_BYTES = 512 * 2**20  # per command; the inputs here are at most a few MB
# What a command must never print raw: the controls common.cli escapes, the line break aside.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
AFTER_BREAK = "QZXJ"  # every name with a line break has this after it: a line starting with it is a raw break

# Numbers JSON can hold that a reader may not expect; RAW tokens are written as bare JSON numbers (1e400).
RAW = {"@@1e400@@": "1e400", "@@-1e400@@": "-1e400", "@@digits@@": "9" * 400}
NASTY_NUMBERS = st.one_of(
    st.sampled_from([0, -1, -0.0, 0.5, -1e9, 1e308, 5e-324, 2.2e-308, 1e-320, 2**63, 2**64, -(2**63), 10**30]),
    st.sampled_from([math.nan, math.inf, -math.inf, *RAW]),
    st.integers(),
    st.floats(),
)
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(), st.text(max_size=8))
WRONG_TYPES = st.one_of(
    LEAVES,
    st.lists(LEAVES, max_size=3),
    st.dictionaries(st.text(max_size=4), LEAVES, max_size=3),
    st.builds(lambda depth, leaf: _nested(depth, leaf), st.integers(1, 200), LEAVES),
)
ID_KEYS = ("pid", "tid", "id", "correlation", "External id", "Record function id", "stream", "device", "bind_id")
ID_VALUES = st.one_of(
    st.integers(-3, 3), st.sampled_from([2**63, -(2**64), 10**30, 1.5, math.nan]), st.text(max_size=3), st.none()
)
CONTROLS = "\x1b[31m\r\x07\x00\x7f\x9b\u202e\u2066\u200f\ufeff\u2028"


def _nested(depth: int, leaf: object) -> object:
    """`leaf` inside `depth` lists and objects, alternating."""
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"k": leaf}
    return leaf


@st.composite
def hostile_names(draw: st.DrawFn) -> str:
    """A kernel or op name a terminal or a parser might choke on: controls, bidi, a line break, long, templates."""
    kind = draw(st.sampled_from(["controls", "break", "long", "templates", "text"]))
    if kind == "controls":
        return "k" + "".join(draw(st.lists(st.sampled_from(CONTROLS), min_size=1, max_size=6))) + "k"
    if kind == "break":
        return draw(st.sampled_from(["void f", "aten::mm", ""])) + "\n" + AFTER_BREAK
    if kind == "long":
        size = draw(st.sampled_from([200, 5_000, 100_000, *([1_000_000] if SLOW else [])]))
        return draw(st.sampled_from(["a", "<", ">", "(", " ", "é", "::"])) * size
    if kind == "templates":  # short_name reads them; deep ones are slow there (issue 31, item 3)
        depth = draw(st.integers(1, 2_000 if SLOW else 60))
        return "void k" + "<a, b" * depth + ">" * depth + "(int)"
    return draw(st.text(max_size=40))


def leaves(doc: object, keep) -> list[tuple[object, object]]:
    """Every (container, key) below `doc` whose key and value `keep(key, value)` accepts."""
    found, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if keep(key, value):
                found.append((node, key))
            stack.append(value)
    return found


def mutate(data: st.DataObject, keep, values: st.SearchStrategy, most: int = 4) -> tuple[Path, dict]:
    """A fixture with 1 to `most` of its values that `keep` accepts replaced by draws from `values`."""
    source = data.draw(st.sampled_from(SOURCES), label="fixture")
    doc = json.loads(json.dumps(DOCS[source]))
    spots = leaves(doc, keep)
    assume(spots)
    for _ in range(data.draw(st.integers(1, most), label="mutations")):
        node, key = spots[data.draw(st.integers(0, len(spots) - 1))]
        node[key] = data.draw(values, label=f"{key!r} was {node[key]!r:.40}")
    return source, doc


def dumped(doc: object) -> bytes:
    """`doc` as JSON (NaN and Infinity as Python writes them), the RAW tokens as bare numbers."""
    text = json.dumps(doc)
    for token, raw in RAW.items():
        text = text.replace(json.dumps(token), raw)
    return text.encode("utf-8", "surrogatepass")


def check_commands(capsys: pytest.CaptureFixture, blob: bytes, name: str = "t.json.gz", other: Path = SOURCES[0]):
    """Write `blob` as trace `name`; run the summary on it and the diff of `other` against it. Each exits 0 or 2 (an
    exception fails the test), prints no raw control, no name broken over two lines, and peaks under PEAK_BYTES."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(blob)
        runs = [
            (summary.main, [path, "--explain", "--markdown", "--per-step"]),
            (diff.main, [other, path]),
            (diff.main, [path, path, "--markdown"]),
        ]
        for main, argv in runs:
            tracemalloc.start()
            try:
                code, out, err = command(main, capsys, *argv)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert code in (0, 2), (main.__module__, code, err[-2000:])
            for line in (out + err).splitlines():
                assert not RAW_CONTROL.search(line), line[:300]
                assert not line.lstrip(" |`").startswith(AFTER_BREAK), line[:300]
            assert peak < PEAK_BYTES, f"{main.__module__}: {peak / 2**20:.0f} MiB"


def as_gzip(doc: object) -> bytes:
    return gzip.compress(dumped(doc), mtime=0)


def is_number(key: object, value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@given(data=st.data())
def test_fixtures_with_nasty_numbers_exit_0_or_2(data, capsys):
    _, doc = mutate(data, is_number, NASTY_NUMBERS)
    check_commands(capsys, as_gzip(doc))


@given(data=st.data())
def test_fixtures_with_values_of_the_wrong_type_or_deep_nesting_exit_0_or_2(data, capsys):
    _, doc = mutate(data, lambda key, value: True, WRONG_TYPES)
    check_commands(capsys, as_gzip(doc))


@given(data=st.data())
def test_fixtures_with_mixed_up_ids_exit_0_or_2(data, capsys):
    _, doc = mutate(data, lambda key, value: key in ID_KEYS, ID_VALUES, most=8)
    check_commands(capsys, as_gzip(doc))


@given(data=st.data())
def test_fixtures_with_hostile_names_exit_0_or_2_and_print_them_escaped(data, capsys):
    _, doc = mutate(data, lambda key, value: key == "name" and isinstance(value, str), hostile_names(), most=6)
    check_commands(capsys, as_gzip(doc))


@given(data=st.data(), gz=st.booleans())
def test_truncated_fixtures_are_one_error_line_or_read(data, gz, capsys):
    source = data.draw(st.sampled_from(SOURCES), label="fixture")
    blob = dumped(DOCS[source])
    blob = blob[: data.draw(st.integers(0, len(blob) - 1), label="cut at")]
    check_commands(capsys, gzip.compress(blob, mtime=0) if gz else blob, "t.json.gz" if gz else "t.json")


@given(data=st.data())
def test_fixtures_with_damaged_gzip_are_one_error_line_or_read(data, capsys):
    blob = bytearray(data.draw(st.sampled_from(SOURCES), label="fixture").read_bytes())
    for _ in range(data.draw(st.integers(1, 4), label="damages")):
        at = data.draw(st.integers(0, len(blob) - 1), label="at")
        how = data.draw(st.sampled_from(["flip", "cut", "zero", "insert"]), label="how")
        if how == "flip":
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "cut":
            del blob[at:]
        elif how == "zero":
            blob[at : at + 16] = bytes(16)
        else:
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=32))
        if not blob:
            break
    check_commands(capsys, bytes(blob))


# Random traces built from the parts a Kineto trace has: steps, CPU ops with shapes, launches, kernels on streams.
# Two sets of knobs: those the reader must survive today, and the ones that still crash it (issue 31, item 2),
# still open (issue 31 item 2): 0 µs (or denormal) kernels, huge shapes or figures, an int device name, a null
# "Input type".
CATEGORIES = ["cpu_op", "user_annotation", "gpu_user_annotation", "kernel", "gpu_memcpy", "gpu_memset",
              "cuda_runtime", "cuda_driver", "python_function", "ac2g", "Trace", "weird"]  # fmt: skip
LAUNCHES = ["cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaStreamSynchronize",
            "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaGraphLaunch", "ncclKernel"]  # fmt: skip
KERNELS = ["void ampere_sgemm_64x64_nn<float>(int)", "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNN", "Memset (Device)",
           "Memcpy DtoD (Device -> Device)", "triton_poi_fused_gelu_mul_0", "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
           "void at::native::vectorized_elementwise_kernel<4>(int)", "flash_fwd_kernel"]  # fmt: skip
OPS = [
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::add",
    "aten::matmul",
    "aten::baddbmm",
    "aten::convolution",
    "aten::cudnn_convolution",
    "aten::convolution_backward",
    "aten::native_layer_norm",
    "aten::_softmax",
    "aten::sum",
    "aten::add_",
    "aten::copy_",
    "aten::embedding",
    "aten::gather",
    "aten::embedding_dense_backward",
]
# Concrete Inputs: stride, padding, dilation, a dim, flags, a dtype number, and what no formula can read.
CONCRETE = st.lists(st.sampled_from(["", "[1, 1]", "[2]", "[0, 0]", "[-1]", "[]", "True", "False", "15", "-1", "0",
                                     "[True, True, False]", "x", "[1, x]", "1e400", "[10000000000000000000000]"]),
                    max_size=11)  # fmt: skip
ODD_TIMES = st.sampled_from([-1, -1e9, math.nan, math.inf, "@@1e400@@", "@@digits@@", 2**64, "7", None])
TIMES = st.one_of(st.floats(1e-3, 1e6), st.integers(1, 10**6), ODD_TIMES)
DIMS = st.lists(st.lists(st.integers(-1, 4096), max_size=4), max_size=3)
KNOBS = {
    "times": TIMES,
    "dims": DIMS,
    "input_types": st.sampled_from([["float"], [], ["c10::BFloat16"] * 3, [None, 1], ["float", "long int", "Scalar"]]),
    "devices": st.one_of(st.none(), st.sampled_from(["NVIDIA H200", "NVIDIA A100-SXM4-80GB", "", "AMD MI300X"])),
    "figures": st.one_of(st.floats(1, 1e18), st.integers(1, 10**18), st.sampled_from([-1, "7", None])),
}
UNMEASURABLE = {  # 0 µs kernels, shapes and figures no float holds, a number as a device name (issue 31 item 2)
    "times": st.one_of(TIMES, st.sampled_from([0, 0.0, 5e-324, 1e-320])),
    "dims": st.lists(
        st.lists(st.one_of(st.integers(-1, 4096), st.sampled_from([2**40, 2**62, 10**30, 10**400]))), max_size=3
    ),
    "input_types": st.sampled_from([["float"], None, 3]),
    "devices": st.sampled_from(["NVIDIA H200", 7, 1.5, None]),
    "figures": st.one_of(NASTY_NUMBERS),
}


@st.composite
def synthetic_traces(draw: st.DrawFn, knobs: dict[str, st.SearchStrategy]) -> dict:
    """A few steps of CPU ops, launches and the kernels they launch, with times, shapes, a device and the suite's
    figures drawn from `knobs`, maybe after the tiny GPU trace's own events."""
    times = knobs["times"]
    doc = tiny_gpu_trace() if draw(st.booleans()) else {"traceEvents": []}
    events, correlation, external, ts = doc["traceEvents"], 100, 100, draw(st.floats(0, 1e12))
    for step in range(draw(st.integers(0, 5))):
        events.append(ev("user_annotation", f"ProfilerStep#{step + draw(st.integers(0, 2))}", ts, draw(times)))
        for _ in range(draw(st.integers(0, 6))):
            cat = draw(st.sampled_from(["cpu_op", "launch", "launch", "user_annotation", *CATEGORIES]))
            start, dur = draw(times), draw(times)
            if type(start) is float or type(start) is int and start < 10**18:
                start += ts  # in its step, mostly
            if cat == "cpu_op":
                external += 1
                args = {"Input Dims": draw(knobs["dims"]), "Input type": draw(knobs["input_types"]),
                        "Concrete Inputs": draw(CONCRETE)}  # fmt: skip
                events.append(ev("cpu_op", draw(st.sampled_from(OPS)), start, dur, **{"External id": external}, **args))
            elif cat == "launch":
                correlation += 1
                ids = {"correlation": correlation, "External id": external}
                events.append(ev("cuda_runtime", draw(st.sampled_from(LAUNCHES)), start, dur, **ids))
                gpu = draw(st.sampled_from(["kernel", "kernel", "gpu_memcpy", "gpu_memset"]))
                name = draw(st.one_of(st.sampled_from(KERNELS), hostile_names()))
                events.append(ev(gpu, name, draw(times), draw(times), tid=draw(st.integers(7, 9)), **ids))
            else:
                events.append(ev(cat, draw(hostile_names()), start, dur))
        ts += draw(st.floats(0, 1e4))
    device = draw(knobs["devices"])
    if device is not None:
        doc["deviceProperties"] = [{"id": 0, "name": device}]
    if draw(st.booleans()):
        figures = {"flops": draw(knobs["figures"]), "bytes": draw(knobs["figures"]),
                   "memory": {"peak_bytes": draw(knobs["figures"])}}  # fmt: skip
        doc["suite"] = {"script": "04_x", "tag": "fuzz", "label": draw(st.sampled_from(["fwd", "mm"])), **figures}
    return doc


@given(doc=synthetic_traces(KNOBS))
def test_synthetic_traces_exit_0_or_2(doc, capsys):
    check_commands(capsys, as_gzip(doc))


@given(doc=synthetic_traces(UNMEASURABLE))
def test_synthetic_traces_with_figures_no_float_holds_exit_0_or_2(doc, capsys):
    check_commands(capsys, as_gzip(doc))


def subnormal_trace() -> dict:
    """The tiny GPU trace with every kernel, copy and memset a subnormal 5e-324 µs long."""
    doc = tiny_gpu_trace()
    for event in doc["traceEvents"]:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            event["dur"] = 5e-324
    return doc


def test_subnormal_durations_print_no_line_over_120_columns(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(subnormal_trace()))
    for main, argv in ((summary.main, [path, "--explain", "--per-step"]), (diff.main, [SOURCES[0], path])):
        code, out, err = command(main, capsys, *argv)
        assert code == 0, err
        assert max(len(line) for line in (out + err).splitlines()) <= 120


def test_a_peak_memory_no_float_holds_is_no_figure_in_the_summary_and_diff(tmp_path, capsys):
    doc = tiny_gpu_trace()
    doc["suite"] = {"script": "04_x", "tag": "huge", "label": "fwd", "memory": {"peak_bytes": 10**400}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    for main, argv in (
        (summary.main, [path]),
        (diff.main, [SOURCES[0], path]),
        (summary.main, [SOURCES[0], "--baseline", path]),
    ):
        code, out, err = command(main, capsys, *argv)
        assert code == 0, err


def test_a_ranks_peak_memory_no_float_holds_is_no_figure(tmp_path, capsys):
    paths = []
    for rank in range(2):
        doc = comms_trace(rank, 2)
        doc["suite"] = {"script": "06_x", "tag": f"rank{rank}", "memory": {"peak_bytes": 10**400}}
        paths.append(tmp_path / f"rank{rank}.json")
        paths[-1].write_text(json.dumps(doc))
    code, out, err = command(summary.main, capsys, *paths)
    assert code == 0, err


@pytest.mark.parametrize("dims", [[2**62, 2**62], [2**62] * 24_000, [10**30], [3] * 40 + [2**40]])
def test_dims_no_tensor_can_hold_are_no_shape_to_the_roofline(dims):
    op = ShapedOp("aten::add", [dims, dims], ["float", "float"], ["", ""])
    assert op_work(op) == (None, None)


def test_a_zero_dim_among_huge_ones_is_an_empty_tensor_to_the_roofline():
    op = ShapedOp("aten::add", [[0, 2**62, 2**62]] * 2, ["float", "float"], ["", ""])
    assert op_work(op) == (0.0, 0.0)
