"""Files as a normal write leaves them, whole or absent; folder names the profiler cannot use, refused up front;
a container's memory limit, v1 or v2."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CPU_DTYPE, ROOT, command, run, tiny_gpu_trace, usage_error, written

import common.files
import common.harness.machine
from common.analysis.summary import main as summary_main
from common.harness.machine import cpu_available_bytes


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


NO_V1_LIMIT = 9223372036854771712  # what cgroup v1's memory.limit_in_bytes reads without a limit
GB = 10**9


def fake_machine(tmp_path: Path, cgroup: str, mounts: list[str], files: dict[str, object]) -> tuple[Path, Path]:
    """A /proc (self/cgroup, self/mountinfo, meminfo with 20 GB available) and a file tree of cgroup files
    under `tmp_path`: the roots cpu_available_bytes reads instead of the machine's."""
    proc, root = tmp_path / "proc", tmp_path / "root"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text("".join(line + "\n" for line in mounts))
    (proc / "meminfo").write_text(f"MemTotal: {64 * GB // 1024} kB\nMemAvailable: {20 * GB // 1024} kB\n")
    for name, value in files.items():
        path = root / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
    return proc, root


V1_MOUNTS = [
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu",
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
]
V1_CGROUP = "4:memory:/jobs/job7\n1:cpu:/\n0::/\n"
V2_MOUNTS = ["30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate"]
V2_CGROUP = "0::/user.slice/job7\n"
M1 = "/sys/fs/cgroup/memory"
M2 = "/sys/fs/cgroup"


@pytest.mark.parametrize(
    "cgroup, mounts, files, available",
    [
        # v1: the process's own cgroup has the 4 GB limit, its root none (the child cgroup)
        (V1_CGROUP, V1_MOUNTS, {f"{M1}/memory.limit_in_bytes": NO_V1_LIMIT, f"{M1}/jobs/memory.limit_in_bytes":
         NO_V1_LIMIT, f"{M1}/jobs/job7/memory.limit_in_bytes": 4 * GB, f"{M1}/jobs/job7/memory.usage_in_bytes": GB},
         3 * GB),
        # v1: a parent's limit is the smaller one, and its use counts its children's
        (V1_CGROUP, V1_MOUNTS, {f"{M1}/jobs/memory.limit_in_bytes": 3 * GB, f"{M1}/jobs/memory.usage_in_bytes":
         2 * GB, f"{M1}/jobs/job7/memory.limit_in_bytes": 8 * GB, f"{M1}/jobs/job7/memory.usage_in_bytes": GB},
         GB),
        # v2: the parent's memory.max wins over the process's own "max"
        (V2_CGROUP, V2_MOUNTS, {f"{M2}/user.slice/memory.max": 5 * GB, f"{M2}/user.slice/memory.current": GB,
         f"{M2}/user.slice/job7/memory.max": "max", f"{M2}/user.slice/job7/memory.current": GB}, 4 * GB),
        # v2: the process's own limit, below its parents'
        (V2_CGROUP, V2_MOUNTS, {f"{M2}/user.slice/memory.max": 9 * GB, f"{M2}/user.slice/job7/memory.max": 2 * GB,
         f"{M2}/user.slice/job7/memory.current": GB // 2}, 3 * GB // 2),
        # a container: its cgroup is the mount's root, and a path outside it reads the mount's own files
        ("4:memory:/docker/abc\n", ["35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory"],
         {f"{M1}/memory.limit_in_bytes": 6 * GB, f"{M1}/memory.usage_in_bytes": GB}, 5 * GB),
        # a mount point with a space, escaped in mountinfo
        (V2_CGROUP, ["30 23 0:26 / /my\\040cgroups rw - cgroup2 cgroup2 rw"],
         {"/my cgroups/user.slice/job7/memory.max": 2 * GB}, 2 * GB),
        # no limit anywhere: MemAvailable
        (V2_CGROUP, V2_MOUNTS, {f"{M2}/user.slice/memory.max": "max", f"{M2}/user.slice/job7/memory.max": "max"},
         20 * GB),
        (V1_CGROUP, V1_MOUNTS, {f"{M1}/jobs/job7/memory.limit_in_bytes": NO_V1_LIMIT}, 20 * GB),
    ],
    ids=["v1-own", "v1-parent", "v2-parent", "v2-own", "container", "escaped-mount", "v2-none", "v1-none"],
)  # fmt: skip
def test_the_memory_check_reads_the_process_own_cgroup_and_its_ancestors(tmp_path, cgroup, mounts, files, available):
    proc, root = fake_machine(tmp_path, cgroup, mounts, files)
    assert cpu_available_bytes(proc, root) == available


def test_a_cgroup_limit_refuses_shapes_in_one_line_before_allocating(tmp_path, monkeypatch, capsys):
    files = {f"{M1}/jobs/job7/memory.limit_in_bytes": 1 << 30, f"{M1}/jobs/job7/memory.usage_in_bytes": 1 << 29}
    proc, root = fake_machine(tmp_path, V1_CGROUP, V1_MOUNTS, files)
    monkeypatch.setattr(common.harness.machine, "PROC", proc)
    monkeypatch.setattr(common.harness.machine, "FILESYSTEM_ROOT", root)
    err = usage_error(lambda: run("01_matmul_add", tmp_path / "traces", "--size", "6000"), capsys)
    assert "these shapes need about" in err and "0.537 GB free" in err


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


def test_a_plot_whose_temporary_cannot_be_made_names_the_target_not_the_temporary(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    target = tmp_path / "summary.png"

    def read_only(dir, prefix, suffix):
        raise OSError(errno.EROFS, "Read-only file system", f"{dir}/{prefix}k2j4.tmp")

    monkeypatch.setattr(common.files.tempfile, "mkstemp", read_only)
    code, _, err = command(summary_main, capsys, trace_file(tmp_path), "--plot", target)
    assert code == 2 and err == f"error: Read-only file system ({target})\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "common.summary", "/no/such/trace.json"],
        ["-m", "common.diff", "/no/such/a.json", "/no/such/b.json"],
        ["-m", "common.summary", "--no-such-flag"],
    ],
)
def test_a_refusal_with_stderr_on_a_full_device_still_exits_2(argv):
    """The error line cannot be written (ENOSPC on stderr): the command still ends with its refusal's code, not
    with Python's 1 for a traceback it could not print either, nor 120 for a failed flush at exit."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=full, timeout=120)
    assert done.returncode == 2 and done.stdout == b""


def test_a_plot_is_written_with_the_mode_a_plain_write_would(tmp_path, capsys, umask_022):
    pytest.importorskip("matplotlib")
    target = tmp_path / "summary.png"
    code, _, _ = command(summary_main, capsys, trace_file(tmp_path), "--plot", target)
    assert code == 0 and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_temporary_removed_by_a_hard_exit_is_never_made_anew(tmp_path):
    # the watchdog's unlink can land while the main thread's open is in flight: an O_CREAT open would make it again
    from common.files import reopen

    gone = tmp_path / ".trace.txt.abc.tmp"
    with pytest.raises(FileNotFoundError):
        reopen(gone, "w")
    assert list(tmp_path.iterdir()) == []


def test_a_reopened_temporary_is_written_from_its_start(tmp_path):
    from common.files import reopen

    made = tmp_path / ".trace.json.abc.tmp"
    made.write_bytes(b"an older, longer content")
    with reopen(made) as out:
        out.write(b"new")
    assert made.read_bytes() == b"new"
