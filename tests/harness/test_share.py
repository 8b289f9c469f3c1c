"""The share command every run prints works as printed on the Pythons readers have, up to the Hub login."""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.harness.share import LOGIN_COMMAND, hub_token_path, share_command, share_lines

USAGE_ERRORS = ("Usage:", "usage:", "No such option", "Missing argument", "No solution found", "unsatisfiable")


def python(version: str) -> str | None:
    """A Python `version` interpreter on this machine (pyenv's, else one on PATH), for uv to run the tool with."""
    found = sorted(glob.glob(f"{Path.home()}/.pyenv/versions/{version}.*/bin/python3"))
    return found[0] if found else shutil.which(f"python{version}")


@pytest.fixture
def hub_home(tmp_path, monkeypatch) -> Path:
    """A Hugging Face home with no token in it, and no token in the environment."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf"


def test_without_a_token_the_login_comes_before_the_share_line(hub_home):
    lines = share_lines(Path("traces"))
    assert lines[1] == f"to share, log in to the Hub once: {LOGIN_COMMAND}" and lines[2].endswith(
        share_command(Path("traces"))
    )


def test_a_token_from_hf_auth_login_or_the_environment_needs_no_login_line(hub_home, monkeypatch):
    hub_home.mkdir()
    (hub_home / "token").write_text("hf_xxx\n")
    assert not any("log in" in line for line in share_lines(Path("traces")))
    (hub_home / "token").unlink()
    monkeypatch.setenv("HF_TOKEN", "hf_yyy")
    assert not any("log in" in line for line in share_lines(Path("traces")))


@pytest.mark.parametrize("env", [{}, {"HF_HOME": "/x/hf"}, {"XDG_CACHE_HOME": "/x/cache"}, {"HF_TOKEN_PATH": "/x/t"}])
def test_the_token_is_looked_for_where_huggingface_hub_keeps_it(env, monkeypatch):
    pytest.importorskip("huggingface_hub")
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_HOME", "XDG_CACHE_HOME", "HF_TOKEN_PATH")}
    for name in ("HF_HOME", "XDG_CACHE_HOME", "HF_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    theirs = subprocess.run(
        [sys.executable, "-c", "from huggingface_hub import constants; print(constants.HF_TOKEN_PATH)"],
        env={**clean, **env}, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert str(hub_token_path()) == theirs


def test_every_share_line_fits_120_columns(hub_home):
    assert all(len(line) <= 120 for line in share_lines(Path("traces")))


@pytest.mark.parametrize("folder", ["traces", "my traces", "it's/traces"])
def test_the_share_command_split_as_a_shell_does_runs_the_pinned_release(folder):
    """0.1.0's form (`trace-util FOLDER -b traces`), pinned with ==, since 0.2.0 rejects it; the folder one word."""
    words = shlex.split(share_command(Path(folder)))
    assert words[:4] == ["uvx", "--from", "trace-util==0.1.0", "trace-util"]
    assert words[4:] == [folder, "-b", "traces"]


@pytest.mark.slow
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


def test_a_long_traces_folder_puts_the_share_command_on_lines_a_shell_joins():
    """A traces folder deep in a temporary path made the share line 150 columns: now each line fits, and the lines,
    joined as the shell joins ` \\`-ended lines, are the command."""
    folder = Path("/tmp/pytest-of-someone/pytest-123/popen-gw1/test_a_long_name_of_a_test0/traces")
    lines = "\n".join(share_lines(folder)).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("share "))
    assert all(len(line) <= 120 for line in lines) and lines[at].endswith("as Perfetto links:")
    joined = " ".join(line.strip().removesuffix(" \\") for line in lines[at + 1 :])
    assert shlex.split(joined) == shlex.split(share_command(folder))
