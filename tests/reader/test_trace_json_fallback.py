"""Without msgspec the reader still reads every trace, with the standard library, and says so once."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import FIXTURES, ROOT

READ = """
import json, sys
sys.modules["msgspec"] = None  # as on a Python without the package
from common.reader.build import read_trace
for path in sys.argv[1:]:
    t = read_trace(path)
    print(json.dumps([[len(s.kernels), s.launches, s.gpu_busy_us, sorted(s.cpu_ops.items())] for s in t.steps]))
"""


def steps_of(*args: str) -> tuple[list, str]:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_without_msgspec_the_standard_library_reads_the_same_steps_and_says_so_once():
    paths = [str(p) for p in sorted(FIXTURES.rglob("*.json.gz"))[:3]]
    plain, said = steps_of("-c", READ, *paths)
    fast, quiet = steps_of("-c", READ.replace('sys.modules["msgspec"] = None', "pass"), *paths)
    assert plain == fast and len(plain) == 3
    assert said.count("msgspec is not installed") == 1 and "msgspec" not in quiet
