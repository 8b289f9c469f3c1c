"""Windows exports with Python stacks write frame names with unescaped backslashes (`torch\\profiler\\profiler.py`,
pytorch#60187, #92988, kineto#336): the reader reads them again with each lone backslash doubled, and says so."""

from __future__ import annotations

import gzip
import json

import pytest
from helpers import ev

from common.reader import trace_json
from common.reader.build import read_trace
from common.reader.kinds import PYTHON

# Frame names as Windows wrote them: lone backslashes, one \u with no 4 hex digits, one valid escape (\\)
FRAMES = ["C:\\Users\\me\\lib\\site-packages\\profiler\\profiler.py(500): step", "x\\uZZ", "\\\\"]


def _broken(frames: list[str]) -> bytes:
    """A trace whose Python frames are named `frames` with their backslashes written unescaped, as the bug does."""
    events = [ev("cpu_op", "aten::mm", 0, 50)]
    events += [ev("python_function", f"@{k}", 60 + 10 * k, 5) for k in range(len(frames))]
    text = json.dumps({"traceEvents": events})
    for k, frame in enumerate(frames):
        text = text.replace(f'"@{k}"', f'"{frame}"')
    return text.encode()


@pytest.mark.parametrize("block", [1, 2, 3, 5, 7, 64, 1 << 20])
def test_lone_backslashes_are_doubled_and_counted(tmp_path, monkeypatch, block):
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", block)  # reads that end inside an escape, at every place
    path = tmp_path / "windows.json.gz"
    path.write_bytes(gzip.compress(_broken(FRAMES)))
    trace = read_trace(path)  # before: "JSON is malformed: invalid escape character"
    names = set(trace.tree.threads[1].layer(PYTHON).names)
    # a lone backslash is kept as written; a valid escape (\\ here) is read as JSON reads it
    assert names == {"C:\\Users\\me\\lib\\site-packages\\profiler\\profiler.py(500): step", "x\\uZZ", "\\"}, names
    assert "repaired 7 unescaped backslashes (Windows paths in Python frames, a known exporter bug)" in trace.notes


def test_valid_escapes_are_not_repaired(tmp_path):
    path = tmp_path / "escaped.json"
    path.write_bytes(_broken(['a\\"b\\u00e9\\n\\\\\\/', "C:\\data"]))
    trace = read_trace(path)
    assert set(trace.tree.threads[1].layer(PYTHON).names) == {'a"bé\n\\/', "C:\\data"}
    assert "repaired 1 unescaped backslash (Windows paths" in " ".join(trace.notes), trace.notes


def test_json_still_malformed_after_the_repair_is_refused_in_one_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_bytes(_broken(["C:\\data"]).replace(b'"dur": 5', b'"dur": 5 5'))
    with pytest.raises(ValueError, match=r"not a readable Chrome trace \(JSON is malformed: .*\(byte \d+\)\)$"):
        read_trace(path)
