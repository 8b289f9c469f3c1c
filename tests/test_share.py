"""The share command every run prints works as printed on the Pythons readers have, up to the Hub login."""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from common.export import share_command

USAGE_ERRORS = ("Usage:", "usage:", "No such option", "Missing argument", "No solution found", "unsatisfiable")


def python(version: str) -> str | None:
    """A Python `version` interpreter on this machine (pyenv's, else one on PATH), for uv to run the tool with."""
    found = sorted(glob.glob(f"{Path.home()}/.pyenv/versions/{version}.*/bin/python3"))
    return found[0] if found else shutil.which(f"python{version}")


def test_the_share_command_pins_the_release_whose_command_line_it_uses():
    assert share_command(Path("traces")) == "uvx --from trace-util==0.1.0 trace-util traces -b traces"


@pytest.mark.skipif(shutil.which("uvx") is None, reason="needs uv")
@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_the_printed_share_command_gets_to_the_login_on_python(version, tmp_path):
    interpreter = python(version)
    if interpreter is None:
        pytest.skip(f"no Python {version} on this machine")
    (tmp_path / "traces" / "01_x").mkdir(parents=True)
    (tmp_path / "traces" / "01_x" / "a.json").write_text(json.dumps({"traceEvents": []}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_", "UV_PYTHON"))}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9", UV_PYTHON=interpreter, NO_COLOR="1")
    command = share_command(tmp_path / "traces").replace(str(tmp_path / "traces"), "traces")
    done = subprocess.run(
        shlex.split(command), cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    out = done.stdout + done.stderr
    if "Failed to fetch" in out and "pypi.org" in out:
        pytest.skip("PyPI is not reachable from here, so uv cannot install trace-util")
    assert done.returncode == 1 and not any(sign in out for sign in USAGE_ERRORS), out
    assert "hf auth login" in out, out  # no token: it stops at the login, before any upload
