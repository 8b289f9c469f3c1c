"""The trace file reader: the same events in any block size, and odd but parseable JSON read or refused in one line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT, command, ev, tiny_gpu_trace

from common.analysis.summary import main as summary_main
from common.reader import trace_json
from common.reader.build import read_trace
from common.reader.model import Trace

TINY_BLOCK = 64  # bytes: a block ends inside nearly every event, the events array and the entries after it


def figures(trace: Trace) -> list[tuple]:
    """Everything the reader took from a trace, step by step."""
    return [
        (s.number, s.start_us, s.dur_us, s.region_us, dict(s.cpu_ops), dict(s.runtime), s.gpu) for s in trace.steps
    ] + [(trace.label, trace.device_name, trace.meta, trace.skipped)]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*/*.json.gz"))[:3], ids=lambda p: p.parent.name)
def test_a_trace_read_in_tiny_blocks_gives_what_it_gives_in_large_ones(path, monkeypatch):
    whole = figures(read_trace(path))
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", TINY_BLOCK)
    assert figures(read_trace(path)) == whole


def test_entries_after_the_events_array_are_read_in_tiny_blocks(tmp_path, monkeypatch):
    data = tiny_gpu_trace()
    data["deviceProperties"] = [{"name": "GPU A"}, {"name": "GPU B"}]  # after traceEvents, with a `}, {` in it
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", TINY_BLOCK)
    trace = read_trace(path)
    assert trace.device_name == "GPU A" and [s.number for s in trace.steps] == [2, 3]


def test_a_gzipped_trace_streams_in_tiny_blocks(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(tiny_gpu_trace(), fh)
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", TINY_BLOCK)
    assert [len(s.kernels) for s in read_trace(path).steps] == [2, 1]


@pytest.mark.parametrize("block", [TINY_BLOCK, 1 << 20])
def test_nan_and_infinity_tokens_anywhere_are_read_and_their_events_skipped(tmp_path, monkeypatch, block):
    data = tiny_gpu_trace()
    data["traceEvents"].append(ev("cpu_op", "aten::odd", 20, 1))
    text = json.dumps({"baseTimeNanoseconds": 1, **data})
    text = text.replace('"baseTimeNanoseconds": 1', '"baseTimeNanoseconds": NaN')
    text = text.replace('"ts": 20, "dur": 1', '"ts": Infinity, "dur": 1')  # the odd cpu_op
    text = text.replace('"correlation": 99', '"correlation": 99, "x": -Infinity')
    path = tmp_path / "nan.json"
    path.write_text(text)
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", block)
    trace = read_trace(path, region="fwd")
    assert trace.skipped == 1 and [s.number for s in trace.steps] == [2, 3]
    assert "aten::odd" not in trace.steps[0].cpu_ops and trace.steps[0].region_us == 80


def test_a_lone_surrogate_in_a_name_is_kept_and_printed_escaped(tmp_path, capsys):
    text = json.dumps(tiny_gpu_trace()).replace("ampere_sgemm_64x64_nn", "ampere_sgemm\\ud800")
    path = tmp_path / "surrogate.json"
    path.write_text(text)
    names = {k.name for s in read_trace(path).steps for k in s.kernels}
    assert "void ampere_sgemm\ud800<float>(int)" in names
    code, out, _ = command(summary_main, capsys, path, "--wide")
    assert code == 0 and "ampere_sgemm\\ud800" in out


@pytest.mark.parametrize("block", [TINY_BLOCK, 1 << 20])
@pytest.mark.parametrize("after", [" xyz", "two traces"])
def test_trailing_garbage_or_a_second_trace_is_refused_in_one_line_naming_the_file(tmp_path, capsys, monkeypatch,
                                                                                   block, after):  # fmt: skip
    text = json.dumps(tiny_gpu_trace())
    path = tmp_path / "joined.json"
    path.write_text(text + (text if after == "two traces" else after))
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", block)
    code, out, err = command(summary_main, capsys, path)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"{path}: not a readable Chrome trace" in err and "trailing characters" in err


class CountingDecoder:
    """The events decoder, counting the bytes it is handed."""

    def __init__(self, inner: trace_json.msgspec.json.Decoder) -> None:
        self.inner, self.bytes = inner, 0

    def decode(self, doc: bytes) -> object:
        self.bytes += len(doc)
        return self.inner.decode(doc)


@pytest.mark.parametrize("block", [TINY_BLOCK, 4096, 1 << 20])
@pytest.mark.parametrize("where", [0.3, 0.99])  # in a block's run of events, and in the file's tail
def test_malformed_json_is_refused_naming_the_byte_where_it_breaks(tmp_path, monkeypatch, block, where):
    text = json.dumps({"traceEvents": [ev("cpu_op", f"op{i}", i, 1) for i in range(500)], "suite": {}})
    at = text.index(":", int(len(text) * where))
    path = tmp_path / "bad.json"
    path.write_text(text[:at] + "!" + text[at + 1 :])
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", block)
    with pytest.raises(ValueError, match=rf"^{path}: not a readable Chrome trace \(.*\(byte {at}\)\)$"):
        read_trace(path)


def test_one_huge_value_is_decoded_in_work_linear_in_its_size(tmp_path, monkeypatch):
    data = tiny_gpu_trace()
    huge = "}, {" * 250_000  # 1 MB, every 4 bytes a place where an event might end
    data["traceEvents"].insert(0, ev("cpu_op", huge, 0, 1))
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data))
    counting = CountingDecoder(trace_json._EVENTS)
    monkeypatch.setattr(trace_json, "_EVENTS", counting)
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", 4096)
    assert [s.number for s in read_trace(path).steps] == [2, 3]
    assert counting.bytes < 6 * path.stat().st_size  # retrying at every block would decode some 250 times as much


def test_json_nested_too_deeply_inside_an_event_is_one_line(tmp_path):
    text = json.dumps(tiny_gpu_trace()).replace('"correlation": 99', '"x": ' + "[" * 100_000 + "]" * 100_000)
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}: not a Chrome trace \\(JSON nested too deeply"):
        read_trace(path)


def test_events_are_handed_on_as_typed_structs_with_the_fields_the_reader_uses(tmp_path):
    event = ev("kernel", "k", 1.5, 2, tid=7, correlation=5, grid=[1, 2, 3])
    event["args"].update({"External id": 9, "registers per thread": 32, "Input Dims": [[1]]})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [event], "suite": {"tag": "x"}}))
    seen: list[trace_json.Event] = []
    assert trace_json.stream_json(path, seen.extend) == {"suite": {"tag": "x"}}
    (got,) = seen
    assert (got.ph, got.cat, got.name, got.ts, got.dur, got.tid, got.pid) == ("X", "kernel", "k", 1.5, 2.0, 7, 1)
    args = trace_json.args_of(got.args)  # decoded only where the reader asks
    assert (args.correlation, args.grid, args.registers, args.external) == (5, [1, 2, 3], 32, 9)
    assert trace_json.decoded(args.dims) == [[1]]
    assert not hasattr(args, "cbid") and not hasattr(got, "id")  # not used by the reader: skipped unread


def test_events_the_caller_keeps_keep_their_args_while_later_blocks_are_read(tmp_path, monkeypatch):
    data = tiny_gpu_trace()
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", TINY_BLOCK)  # the events' args refer into blocks read since
    seen: list[trace_json.Event] = []
    trace_json.stream_json(path, seen.extend)
    got = [None if (a := trace_json.args_of(e.args)) is None else a.correlation for e in seen]
    assert got == [e.get("args", {}).get("correlation") for e in data["traceEvents"]] and any(got)


def test_args_that_are_not_an_object_read_as_none_and_the_event_is_still_kept(tmp_path):
    data = tiny_gpu_trace()
    sgemm = next(e for e in data["traceEvents"] if e.get("cat") == "kernel" and e["args"].get("correlation") == 2)
    sgemm["args"] = [2]  # JSON, but no object: no correlation ties the kernel to its launch
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    seen: list[trace_json.Event] = []
    trace_json.stream_json(path, seen.extend)
    [odd] = [e for e in seen if e.cat == "kernel" and e.ts == sgemm["ts"]]
    assert trace_json.args_of(odd.args) is None
    trace = read_trace(path)  # tiny_gpu_trace's steps have 2 and 1 kernels
    assert [len(s.kernels) for s in trace.steps] == [1, 1] and "1 GPU ops" in " ".join(trace.notes)


def test_args_msgspec_types_whole_give_what_the_loose_reading_gives_on_any_value(tmp_path, monkeypatch):
    """The fast path (trace_json.typed_args, then typed_gpu_op) must keep exactly what the loose one (args_of, then
    gpu_op's checks) keeps, whatever each entry holds: odd values send an event down the loose path."""
    import random

    from common.reader.build import _Collector

    rng = random.Random(5)
    values = [1, 7, 0, -3, 2**70 + 1, 2.0, 2.5, -0.0, True, None, "5", [], [1, 2, 3], [1.0, 2, 3], [True], [2**64],
              {"a": 1}, 1e300, "HUGE"]  # fmt: skip
    typed_well = [1, 7, 2**70 + 1, None, "5", [], [1, 2, 3], [2**64]]  # each entry's type, for some key
    keys = list(trace_json.ARGS_FIELDS.values())
    events = []
    for i in range(1200):
        good = i % 2 and [v for v in typed_well if not isinstance(v, list)] or values
        args = {key: rng.choice(good) for key in keys if rng.random() < 0.8}
        if i % 4 == 1:  # dims that type too
            args["grid"] = rng.choice([[], [1, 2, 3], [2**64], None])
        cat = rng.choice(["kernel", "gpu_memcpy", "cuda_runtime", "cuda_driver"])
        events.append({**ev(cat, f"k{i % 5}", 10 + i, 1, tid=rng.choice([7, "s", 2.0])), "args": args})
    text = json.dumps({"traceEvents": events}).replace('"HUGE"', "1e400")  # out of msgspec's range
    path = tmp_path / "odd.json"
    path.write_text(text)
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", 4096)  # many blocks: a block holding 1e400 is not refused whole

    def kept() -> tuple[list, list]:
        collector = _Collector()
        trace_json.stream_json(path, collector.add)
        return collector.gpu, collector.launches

    typed = kept()
    monkeypatch.setattr(trace_json, "typed_args", lambda value, decoder: None)  # everything read loosely
    loose = kept()
    assert typed == loose and len(typed[0]) > 100 and len(typed[1]) > 100
    assert any(op.grid == (1, 2, 3) for _, _, op in typed[0]) and any(corr == 1 for _, corr, _ in typed[0])
    decoder = trace_json.GPU_ARGS_DECODER
    fast = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy") and _types(decoder, e["args"])]
    assert len(fast) > 20 and any(e["args"].get("grid") == [] for e in fast)  # both paths taken


def _types(decoder, args: dict) -> bool:
    import msgspec

    try:
        decoder.decode(json.dumps(args))
    except msgspec.ValidationError:
        return False
    return True


def test_a_400_digit_integer_time_is_an_unusable_time_and_its_event_skipped(tmp_path):
    data = tiny_gpu_trace()
    data["traceEvents"].append(ev("cpu_op", "aten::odd", 20, 10**400))  # found by tests/reader/test_fuzz_reader.py
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    trace = read_trace(path)
    assert trace.skipped == 1 and [s.number for s in trace.steps] == [2, 3]
    assert "aten::odd" not in trace.steps[0].cpu_ops


def test_a_400_digit_integer_in_a_kernels_args_loses_that_entry_alone(tmp_path):
    data = tiny_gpu_trace()
    sgemm = next(e for e in data["traceEvents"] if e.get("cat") == "kernel" and e["args"].get("correlation") == 2)
    sgemm["args"]["est. achieved occupancy %"] = 10**400  # found by tests/reader/test_fuzz_reader.py
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    step = read_trace(path).steps[0]
    [op] = [op for op in step.kernels if op.start == sgemm["ts"]]
    assert len(step.kernels) == 2 and op.launch is not None and op.occupancy_pct is None


def test_a_number_out_of_msgspec_s_range_in_args_loses_that_entry_alone(tmp_path):
    data = tiny_gpu_trace()
    sgemm = next(e for e in data["traceEvents"] if e.get("cat") == "kernel" and e["args"].get("correlation") == 2)
    sgemm["args"]["registers per thread"] = "HUGE"
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data).replace('"HUGE"', "1e400"))  # json reads it as inf; msgspec refuses it
    step = read_trace(path).steps[0]
    [op] = [op for op in step.kernels if op.start == sgemm["ts"]]
    assert len(step.kernels) == 2 and op.launch is not None and op.registers is None


def test_a_bare_array_trace_has_no_header(tmp_path):
    path = Path(tmp_path / "bare.json")
    path.write_text(json.dumps(tiny_gpu_trace()["traceEvents"]))
    assert trace_json.stream_json(path, lambda events: None) == {}


def test_the_summary_and_the_diff_start_without_importing_the_json_decoder():
    # `--help` stays quick
    probe = "import sys, common.analysis.summary, common.analysis.diff; sys.exit('msgspec' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
