"""Files as a normal write leaves them, whole or absent; folder names the profiler cannot use, refused up front;
a container's memory limit, v1 or v2."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys

import pytest
from helpers import CPU_DTYPE, ROOT, command, run, tiny_gpu_trace, usage_error, written

import common.files
import common.machine
from common.machine import cpu_available_bytes
from common.summary import main as summary_main


def test_a_traces_dir_with_a_newline_is_refused_in_one_line(tmp_path, capsys):
    err = usage_error(lambda: run("01_matmul_add", tmp_path / "a\nb", "--size", "8"), capsys)
    assert "newline" in err and "\\n" in err
    assert written(tmp_path) == []


def test_a_non_ascii_traces_dir_under_an_ascii_locale_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "tracés"
    env = {**os.environ, "LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "01_matmul_add.py"), "--size", "8", "--traces-dir", str(folder)],
        cwd=ROOT, env=env, capture_output=True, timeout=300,
    )  # fmt: skip
    err = done.stderr.decode("ascii", "backslashreplace").strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1 and "cannot pass its name to torch" in err, err
    assert not folder.exists()


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_traces_and_tables_get_the_mode_a_plain_write_would(tmp_path, umask_022):
    assert run("01_matmul_add", tmp_path, "--size", "8") == 0
    for path in written(tmp_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_a_cgroup_v1_memory_limit_is_honoured(tmp_path, monkeypatch, capsys):
    limit, usage = tmp_path / "memory.limit_in_bytes", tmp_path / "memory.usage_in_bytes"
    limit.write_text(f"{1 << 30}\n")
    usage.write_text(f"{1 << 29}\n")
    monkeypatch.setattr(common.machine, "CGROUP_MEMORY", [(tmp_path / "no-v2", tmp_path / "no-v2"), (limit, usage)])
    assert cpu_available_bytes() <= 1 << 29
    err = usage_error(lambda: run("01_matmul_add", tmp_path / "traces", "--size", "6000"), capsys)
    assert "these shapes need about" in err and "0.537 GB free" in err


def test_an_unlimited_cgroup_v1_is_no_limit(tmp_path, monkeypatch):
    limit, usage = tmp_path / "memory.limit_in_bytes", tmp_path / "memory.usage_in_bytes"
    limit.write_text("9223372036854771712\n")  # what v1 reads without a limit
    usage.write_text("4446773248\n")
    monkeypatch.setattr(common.machine, "CGROUP_MEMORY", [(limit, usage)])
    assert cpu_available_bytes() > 1 << 20


def test_out_of_inodes_names_the_trace_and_leaves_no_temporary(tmp_path, capsys):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=10m,nr_inodes=6", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root): " + mounted.stderr.decode().strip())
    try:
        err = usage_error(lambda: run("01_matmul_add", disk, "--size", "8"), capsys)
        trace = disk / "01_matmul_add" / f"8_{CPU_DTYPE}_cold_eager.json"
        assert err == f"error: cannot write {trace}: No space left on device"
        assert written(disk) == []
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)


def trace_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tiny_gpu_trace()))
    return path


def test_plot_to_a_device_is_refused_before_the_table(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, out, err = command(summary_main, capsys, trace_file(tmp_path), "--plot", "/dev/full")
    assert (code, out) == (2, "") and "not a regular file" in err


def test_a_plot_the_disk_cannot_hold_is_one_line_and_leaves_no_file(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(common.files.os, "fsync", disk_full)
    target = tmp_path / "plots" / "summary.png"
    target.parent.mkdir()
    code, _, err = command(summary_main, capsys, trace_file(tmp_path), "--plot", target)
    assert code == 2 and err == f"error: No space left on device ({target})\n"
    assert list(target.parent.iterdir()) == []


def test_a_plot_is_written_with_the_mode_a_plain_write_would(tmp_path, capsys, umask_022):
    pytest.importorskip("matplotlib")
    target = tmp_path / "summary.png"
    code, _, _ = command(summary_main, capsys, trace_file(tmp_path), "--plot", target)
    assert code == 0 and stat.S_IMODE(target.stat().st_mode) == 0o644
