"""The prompt comes back with the last line: a script ends its process once its files are committed (end_process)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from helpers import ROOT, SCRIPTS

from common import cli

LINGERING = (
    "import threading\n"
    "from common.cli import end_process\n"
    "threading.Thread(target=threading.Event().wait).start()  # a thread a normal exit would wait for, forever\n"
    "print('last line')\n"
    "end_process(3)\n"
)


def test_end_process_flushes_the_output_and_ends_with_main_s_code(monkeypatch):
    ended, out = [], io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(cli.os, "_exit", lambda code: ended.append((code, out.getvalue())) or sys.exit(code))
    print("last line", end="")
    with pytest.raises(SystemExit):
        cli.end_process(1)
    assert ended == [(1, "last line")]


def test_end_process_does_not_wait_for_a_thread_still_running():
    done = subprocess.run([sys.executable, "-c", LINGERING], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (3, "last line\n")


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_ends_its_process_with_main_s_code(script):
    tail = (ROOT / f"{script}.py").read_text().rstrip().splitlines()[-2:]
    assert tail[0] == 'if __name__ == "__main__":'
    assert tail[1].strip().startswith(("end_process(main())", "exit_rank(main)")), tail
