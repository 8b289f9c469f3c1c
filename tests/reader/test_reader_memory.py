"""Memory amplification (issue 31, item 4): tens of MB of small JSON values, gzipped to a few tens of KB, where the
reader keeps nothing of them (elements of traceEvents that are not objects, a top-level entry the reader does not
use). Each file is read in a child process, which prints its peak RSS: it must stay far below what decoding the
values whole takes (1 to 2.6 GB before: some 70 bytes of Python objects per 3 bytes of `{},`)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the peak is read from /proc (Linux)")
PEAK_MIB = 400  # the bound on the child's peak RSS; these inputs took 640 to 2,600 MiB
EVENT = json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "tid": 1, "pid": 1}).encode()
LAST = EVENT.replace(b"aten::mm", b"aten::add")
CHUNK = 1 << 20
CHILD = """
import json, sys
if sys.argv[2] == "stdlib":
    sys.modules["msgspec"] = None  # as on a Python without the package
from common.reader.trace_json import stream_json
names = []
try:
    header = stream_json(sys.argv[1], lambda events: names.extend(e.name for e in events if e.name))
    outcome = {"names": names, "header": header}
except ValueError as exc:
    outcome = {"refused": str(exc)}
# The peak RSS of this process's own memory, /proc's VmHWM (KiB). Not getrusage's ru_maxrss: after exec it also
# counts the parent's peak (pytest's, where the child is spawned with vfork).
with open("/proc/self/status") as status:
    outcome["peak_mib"] = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
print(json.dumps(outcome))
"""


def hostile(path: Path, head: bytes, fill: bytes, count: int, tail: bytes) -> Path:
    """A gzip of `head` + `count` times `fill` + `tail`, written a chunk at a time."""
    chunk = fill * (CHUNK // len(fill))
    whole, rest = divmod(count, CHUNK // len(fill))
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(head)
        for _ in range(whole):
            out.write(chunk)
        out.write(fill * rest)
        out.write(tail)
    return path


def read_in_child(path: Path, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["peak_mib"] < PEAK_MIB, outcome["peak_mib"]
    return outcome


@pytest.mark.parametrize("mode", ["msgspec", "stdlib"])
@pytest.mark.parametrize(
    ("fill", "count"),
    [(b"[],", 8_000_000), (b"0.5,", 10_000_000), (b'"ab",', 8_000_000), (b"[[]],", 8_000_000)],
    ids=["empty arrays", "numbers", "strings", "nested arrays"],
)
def test_a_run_of_small_elements_that_are_not_objects_is_dropped_unbuilt(tmp_path, mode, fill, count):
    path = hostile(tmp_path / "t.json.gz", b'{"traceEvents": [' + EVENT + b",", fill, count, LAST + b"]}")
    outcome = read_in_child(path, mode)
    assert outcome.get("names") == ["aten::mm", "aten::add"] and outcome["header"] == {}


def test_one_huge_element_that_is_not_an_object_is_dropped_unbuilt(tmp_path):
    head = b'{"traceEvents": [' + EVENT + b", ["
    path = hostile(tmp_path / "t.json.gz", head, b"{},", 15_000_000, b"{}], " + LAST + b"]}")
    assert read_in_child(path, "msgspec")["names"] == ["aten::mm", "aten::add"]


@pytest.mark.parametrize("where", ["header", "tail", "header and events"])
def test_a_top_level_entry_the_reader_does_not_use_is_skipped_unbuilt(tmp_path, where):
    suite = b'"suite": {"tag": "t"}, '
    if where == "header":
        path = hostile(
            tmp_path / "t.json.gz",
            b'{"x": [',
            b"{},",
            15_000_000,
            b"{}], " + suite + b'"traceEvents": [' + EVENT + b"]}",
        )
    elif where == "tail":
        path = hostile(
            tmp_path / "t.json.gz",
            b'{"traceEvents": [' + EVENT + b"], " + suite + b'"x": [',
            b"{},",
            15_000_000,
            b"{}]}",
        )
    else:  # 2.6 GB before: the header's entry, then a run of elements that are not objects
        head = b'{"x": [' + b"{}," * 15_000_000 + b"{}], " + suite + b'"traceEvents": [' + EVENT + b","
        path = hostile(tmp_path / "t.json.gz", head, b"[],", 8_000_000, LAST + b"]}")
    outcome = read_in_child(path, "msgspec")
    assert outcome.get("header") == {"suite": {"tag": "t"}} and outcome["names"][0] == "aten::mm"


def test_an_entry_the_reader_keeps_is_refused_past_its_bound_naming_it(tmp_path):
    head = b'{"deviceProperties": ['
    path = hostile(tmp_path / "t.json.gz", head, b"{},", 15_000_000, b'{}], "traceEvents": [' + EVENT + b"]}")
    refused = read_in_child(path, "msgspec")["refused"]
    assert refused.startswith(f"{path}: not a readable Chrome trace (its 'deviceProperties' entry takes more than")


@pytest.mark.parametrize("field", ["tid", "ts", "name"])
def test_an_event_field_of_another_type_is_not_built(tmp_path, field):
    head = b'{"traceEvents": [' + EVENT + b', {"ph": "X", "' + field.encode() + b'": ['
    path = hostile(tmp_path / "t.json.gz", head, b"{},", 15_000_000, b"{}]}, " + LAST + b"]}")
    assert read_in_child(path, "msgspec")["names"] == ["aten::mm", "aten::add"]  # the odd event has no name


TRACE_CHILD = """
import json, sys
from common.reader.build import read_trace
trace = read_trace(sys.argv[1])
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
print(json.dumps({"peak_mib": peak, "steps": len(trace.steps), "cpu_ops": sorted(trace.steps[0].cpu_ops)}))
"""


@pytest.mark.parametrize("entry", ["grid", "Input Dims"])
def test_an_args_entry_the_reader_decodes_is_not_built_where_it_is_huge(tmp_path, entry):
    """args_of decodes a kernel's grid, `decoded` a GEMM's Input Dims: a huge value of another type is not a figure
    (None), and a huge shape not a shape."""
    cat = "kernel" if entry == "grid" else "cpu_op"
    head = json.dumps({"ph": "X", "cat": cat, "name": "aten::mm", "ts": 1, "dur": 2, "tid": 1})[:-1].encode()
    head = b'{"traceEvents": [' + head + b', "args": {"correlation": 1, "External id": 3, "' + entry.encode() + b'": ['
    path = hostile(tmp_path / "t.json.gz", head, b"{},", 15_000_000, b"{}]}}, " + LAST + b"]}")
    done = subprocess.run([sys.executable, "-c", TRACE_CHILD, str(path)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["peak_mib"] < PEAK_MIB and outcome["steps"] == 1
    assert outcome["cpu_ops"] == (["aten::add"] if cat == "kernel" else ["aten::add", "aten::mm"])
