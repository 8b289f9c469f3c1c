"""--annotate: a copy of the trace with a "diagnosis" track, in the Chrome trace format Perfetto reads."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from helpers import ROOT, command, tiny_cpu_trace

from common.analysis.summary import main

FIXTURES = ROOT / "tests" / "fixtures"
# What each kind of event needs in the Chrome trace format (Perfetto's JSON importer reads these fields).
REQUIRED = {
    "X": ("ts", "dur", "pid", "tid", "name"),
    "s": ("ts", "pid", "tid", "name", "id", "cat"),
    "f": ("ts", "pid", "tid", "name", "id", "cat", "bp"),
    "M": ("pid", "name", "args"),
}


def summary(capsys, *argv: object) -> tuple[int, str, str]:
    return command(main, capsys, *argv)


def events_of(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), f"{path.name}: no traceEvents list"
    return doc["traceEvents"]


def format_problems(events: list[dict]) -> list[str]:
    """What breaks the Chrome trace format: a field missing for its ph, a flow without both ends, a flow end
    that lies in no complete event of its thread, a flow that ends before it starts."""
    problems = [
        f"{e.get('ph')} {e.get('name')!r} lacks {key}"
        for e in events
        for key in REQUIRED.get(e.get("ph"), ())
        if key not in e
    ]
    ours = [e for e in events if e.get("cat") == "held by"]
    starts = {e["id"]: e for e in ours if e["ph"] == "s"}
    ends = {e["id"]: e for e in ours if e["ph"] == "f"}
    problems += [f"flow {i} has one end" for i in set(starts) ^ set(ends)]
    slices: dict[tuple, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("ph") == "X":
            slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for e in ours:
        if not any(a <= e["ts"] <= b for a, b in slices.get((e["pid"], e["tid"]), [])):
            problems.append(f"flow {e['id']} {e['ph']} at {e['ts']} lies in no slice of its thread")
    both = starts.keys() & ends.keys()
    problems += [f"flow {i} ends before it starts" for i in both if ends[i]["ts"] < starts[i]["ts"]]
    theirs = {e.get("id") for e in events if e.get("ph") in ("s", "t", "f") and e.get("cat") != "held by"}
    problems += [f"flow {i} reuses an id of the trace's own flows" for i in starts.keys() & theirs]
    return problems + _typed_problems(diagnosis(events) + _process(events)) + _nesting_problems(diagnosis(events))


def _process(events: list[dict]) -> list[dict]:
    """The metadata events that name the diagnosis' process and its tracks."""
    pids = {e["pid"] for e in events if e.get("ph") == "M" and e.get("args") == {"name": "diagnosis"}}
    return [e for e in events if e.get("ph") == "M" and e.get("pid") in pids]


def _typed_problems(ours: list[dict]) -> list[str]:
    """Our events' fields as the format types them: pid and tid integers, ts and dur finite numbers of µs, dur not
    negative, a flow's id an integer."""

    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    def integer(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    problems = [f"{e['ph']} {e.get('name')!r}: {key} {e.get(key)!r} is no integer"
                for e in ours for key in ("pid", "tid") if key in e and not integer(e[key])]  # fmt: skip
    problems += [f"{e['ph']} {e.get('name')!r}: {key} {e.get(key)!r} is no finite number"
                 for e in ours for key in ("ts", "dur") if key in e and not number(e[key])]  # fmt: skip
    problems += [f"X {e.get('name')!r} lasts {e['dur']}" for e in ours if e["ph"] == "X" and number(e.get("dur"))
                 and e["dur"] < 0]  # fmt: skip
    problems += [f"flow id {e['id']!r} is no integer" for e in ours if e["ph"] in ("s", "f") and not integer(e["id"])]
    return problems


def _nesting_problems(ours: list[dict]) -> list[str]:
    """Complete events of one track that overlap without one holding the other, which Perfetto cannot stack."""
    tracks: dict[tuple, list[tuple[float, float, str]]] = {}
    for e in ours:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    problems = []
    for slices in tracks.values():
        open_ends: list[float] = []
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                problems.append(f"{name!r} at {start} overlaps a slice it is not inside")
            open_ends.append(end)
    return problems


def diagnosis(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("cat") in ("diagnosis", "held by")]


@pytest.fixture(scope="module")
def annotated(tmp_path_factory) -> Path:
    """Every H200 and foreign fixture and the two gloo ranks, annotated into one folder."""
    out = tmp_path_factory.mktemp("annotated")
    paths = [FIXTURES / "h200", FIXTURES / "foreign", FIXTURES / "ddp_gloo"]
    assert main([*map(str, paths), "--annotate", str(out)]) == 0
    return out


def test_every_fixture_is_annotated_into_a_valid_chrome_trace(annotated):
    expected = sum(len(list((FIXTURES / f).rglob("*.json.gz"))) for f in ("h200", "foreign", "ddp_gloo"))
    written = sorted(annotated.glob("*.json"))
    assert len(written) == expected
    for path in written:
        events = events_of(path)
        assert any(e.get("ph") == "M" and e.get("args") == {"name": "diagnosis"} for e in events), path.name
        assert format_problems(events) == [], path.name


def test_the_copy_keeps_every_event_of_the_trace_in_order(tmp_path, capsys):
    trace = FIXTURES / "h200" / "03_simple_mlp" / "64_128_768_3072_bf16_cold_eager.json.gz"
    code, _, _ = summary(capsys, trace, "--annotate", tmp_path / "a.json")
    original = json.loads(gzip.decompress(trace.read_bytes()))
    copy = json.loads((tmp_path / "a.json").read_text())
    assert code == 0
    assert copy["traceEvents"][: len(original["traceEvents"])] == original["traceEvents"]
    assert {k: v for k, v in copy.items() if k != "traceEvents"} == {
        k: v for k, v in original.items() if k != "traceEvents"
    }


def test_an_annotated_trace_reads_back_with_the_same_verdict(tmp_path, capsys):
    trace = FIXTURES / "foreign" / "dataloader_stall.json.gz"
    _, before, _ = summary(capsys, trace)
    summary(capsys, trace, "--annotate", tmp_path / "a.json")
    code, after, _ = summary(capsys, tmp_path / "a.json")
    verdict = [line for line in before.splitlines() if line.startswith("verdict:")]
    assert code == 0 and verdict and verdict == [line for line in after.splitlines() if line.startswith("verdict:")]


def test_a_dataloader_gap_is_named_by_its_cause_with_an_arrow_to_its_label(tmp_path, capsys):
    summary(capsys, FIXTURES / "counterfactuals" / "dataloader.json.gz", "--annotate", tmp_path / "a.json")
    events = events_of(tmp_path / "a.json")
    gaps = [e for e in diagnosis(events) if e["ph"] == "X" and e["name"].startswith("waiting for the host: the Data")]
    assert gaps and all(e["args"]["held by"].startswith("enumerate(DataLoader)") for e in gaps)
    longest = max(gaps, key=lambda e: e["dur"])
    start = next(e for e in diagnosis(events) if e["ph"] == "s" and longest["ts"] <= e["ts"] <= longest["ts"] + 1e9)
    end = next(e for e in diagnosis(events) if e["ph"] == "f" and e["id"] == start["id"])
    on_its_thread = [e for e in events if e.get("ph") == "X" and (e["pid"], e["tid"]) == (end["pid"], end["tid"])]
    held = [e for e in on_its_thread if e["ts"] <= end["ts"] <= e["ts"] + e["dur"] and "DataLoader" in e["name"]]
    assert held


def test_the_median_step_slice_carries_the_verdict(tmp_path, capsys):
    trace = FIXTURES / "h200" / "01_matmul_add" / "64_bf16_cold_eager.json.gz"
    _, out, _ = summary(capsys, trace, "--annotate", tmp_path / "a.json", "--markdown")  # lines unwrapped
    steps = [e for e in diagnosis(events_of(tmp_path / "a.json")) if e["ph"] == "X" and e["tid"] == 1]
    [median] = [e for e in steps if e["name"].endswith("(median)")]
    assert len(steps) == 3 and f"- verdict: {median['args']['verdict']}\n" in out


def test_a_cpu_trace_gets_its_step_windows_and_no_gaps(tmp_path, capsys):
    trace = tmp_path / "cpu.json"
    trace.write_text(json.dumps(tiny_cpu_trace()))
    code, _, _ = summary(capsys, trace, "--annotate", tmp_path / "a.json")
    marks = diagnosis(events_of(tmp_path / "a.json"))
    assert code == 0 and marks and all(e["tid"] == 1 for e in marks if e["ph"] == "X")


def test_annotating_several_traces_into_a_file_is_one_error_line(tmp_path, capsys):
    (tmp_path / "a.json").write_text("{}")
    code, out, err = summary(capsys, FIXTURES / "ddp_gloo", "--annotate", tmp_path / "a.json")
    assert (code, out.count("annotated:")) == (2, 0) and "need a folder" in err and err.count("\n") == 1
