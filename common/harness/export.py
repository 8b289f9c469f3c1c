"""The on_trace_ready writer: traces/<script>/<tag>.json (Chrome trace) and <tag>.txt (key_averages table).

Both files are written to unique hidden temporaries in the target folder and renamed into place only
when both are whole and the run's output is checked, so concurrent runs never mix their bytes, and a
failed, killed or interrupted run leaves no file of its own under a final name (trace-util and Perfetto
only look at `*.json`), and the earlier run's files of the same tag as they were. Temporaries that a
killed run left behind are removed by the next run into the same folder.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd.profiler_util import EventList

from common.analysis.tables import TEXT_WIDTH
from common.cli import SuiteError
from common.files import normal_mode, reopen
from common.harness.memory import MemoryWatch
from common.harness.runtime import Run
from common.harness.trace_table import read_stopped
from common.interrupts import atomic, forget, removed_on_hard_exit
from common.physics import Work

TABLE_ROWS_PRINTED = 15
MIN_NAME = 20  # the narrowest name column the printed table gets
STALE_TEMP_S = 300  # a temporary this old belongs to a run that was killed
STOPPED_TABLE = (  # under a stopped run's first line: its table is the suite's (common.harness.trace_table)
    "CPU times summed by the suite from the trace's events, as key_averages() sums them (torch's parse of every event\n"
    "takes longer than torchrun waits for a stopped rank); no GPU time: python -m common.summary reads the kernels\n"
)


def sort_key(on_gpu: bool) -> str:
    """The table's sort key: CUDA total on a GPU (the name `table()` accepts), CPU total otherwise."""
    return "cuda_time_total" if on_gpu else "cpu_time_total"


def key_averages_table(averages: EventList, on_gpu: bool, row_limit: int = -1, width: int | None = None) -> str:
    """`averages.table(...)` (from `prof.key_averages()`), sorted for the device; given `width`, with the
    name column shortened (torch ends a cut name with "...") so the table fits it where it can: on the CPU,
    120 columns leave 34 characters for names; a GPU table's ten figure columns alone are 140 wide.

    Torch releases disagree on the GPU key (`cuda_time_total` vs `device_time_total`);
    try both rather than crash on either.
    """
    keys = [sort_key(on_gpu)] + (["device_time_total", "self_cuda_time_total"] if on_gpu else [])
    table = ""
    for key in [*keys, None]:
        try:
            table = averages.table(sort_by=key, row_limit=row_limit)
        except (AttributeError, KeyError, ValueError):
            continue
        over = max(map(len, table.splitlines()), default=0) - width if width else 0
        if over > 0:
            name = len(table.splitlines()[1]) - len(table.splitlines()[1].lstrip("-").lstrip())
            table = averages.table(sort_by=key, row_limit=row_limit, max_name_column_width=max(MIN_NAME, name - over))
        return drop_columns(table, width) if width else table
    return table


# The printed table's columns that go first when it is wider than the terminal (the .txt keeps every column):
# shares of the total, then averages, then the memory columns that profile_memory adds.
DROPPED_FIRST = ("Self CPU %", "CPU total %", "Self CUDA %", "Self XPU %", "CPU time avg", "CUDA time avg",
                 "Self CPU Mem", "Self CUDA Mem", "CPU Mem", "CUDA Mem")  # fmt: skip


def drop_columns(table: str, width: int) -> str:
    """`table` (torch's key_averages layout: a dashed rule line, headers, a rule, rows) without the columns of
    DROPPED_FIRST, one at a time in that order, until every line fits `width`."""
    lines = table.splitlines()
    rule = next((line for line in lines if line.startswith("-")), None)
    if rule is None:
        return table
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    header = lines[lines.index(rule) + 1]
    names = {header[a:b].strip(): (a, b) for a, b in spans}
    keep = list(spans)
    for name in DROPPED_FIRST:
        if max(len(line.rstrip()) for line in lines) <= width:
            break
        if name in names and names[name] in keep:
            keep.remove(names[name])
            lines = ["  ".join(_cell(line, a, b) for a, b in keep) if len(line) >= spans[-1][0] else line
                     for line in table.splitlines()]  # fmt: skip
    return "\n".join(lines) + ("\n" if table.endswith("\n") else "")


def _cell(line: str, start: int, end: int) -> str:
    return line[start:end].ljust(end - start)


def remove_stale_temporaries(folder: Path, older_than_s: float = STALE_TEMP_S) -> None:
    """Delete hidden `.*.tmp` files in `folder` older than `older_than_s` (left by killed runs)."""
    now = time.time()
    for path in folder.glob(".*.tmp"):
        try:
            if now - path.stat().st_mtime > older_than_s:
                path.unlink()
        except OSError:
            pass  # another run removed it, or it is not ours to remove


def temporary_beside(path: Path, made: list[Path] | None = None) -> Path:
    """A new, uniquely named hidden file in `path`'s folder: `.<name>.<random>.tmp`, appended to `made`."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    if made is not None:
        made.append(Path(name))
    return Path(name)


def _keep_earlier(final: Path) -> Path | None:
    """The file under `final` (an earlier run's) kept under a hidden temporary beside it, a hard link or else a
    copy, for TraceFiles.commit to put back; None where there is none."""
    if not final.is_file():
        return None
    keeper = temporary_beside(final)
    removed_on_hard_exit(keeper)
    try:
        keeper.unlink()
        os.link(final, keeper)
    except OSError:
        shutil.copy2(final, keeper)  # a folder without hard links; its OSError ends the commit before the rename
    return keeper


def _put_back(done: list[tuple[Path, Path | None]]) -> None:
    """Undo the renames `done` made, the last first: each final name gets its earlier file back, or loses the new
    one where there was none. What cannot be undone stays as it is (the run's error line says which failed)."""
    for final, earlier in reversed(done):
        try:
            if earlier is not None:
                os.replace(earlier, final)
                forget(earlier)
            else:
                final.unlink(missing_ok=True)
        except OSError:
            pass


def add_metadata(trace: Path, out: Path, meta: dict) -> None:
    """Copy the Chrome trace `trace` to `out` with a top-level `"suite": meta` entry, streaming (any size).

    The profiler does not report a failed write (a full disk leaves a short file), so the trace is
    checked to be one whole JSON object first: an OSError says why it is not."""
    check_whole(trace)
    with trace.open("rb") as src, reopen(out) as dst:
        head = src.read(1)
        while head.isspace():
            head = src.read(1)
        dst.write(b'{"suite": ' + json.dumps(meta).encode() + b",")
        shutil.copyfileobj(src, dst, 1 << 20)


def check_whole(trace: Path) -> None:
    """Raise an OSError saying why the Chrome trace the profiler wrote is not one whole JSON object (a full disk:
    the profiler does not report a short write), by its first and last bytes."""
    with trace.open("rb") as src:
        src.seek(max(trace.stat().st_size - 64, 0))
        whole = src.read().rstrip().endswith(b"}")
        src.seek(0)
        head = src.read(1)
        while head.isspace():
            head = src.read(1)
    if head != b"{" or not whole:
        disk = os.statvfs(trace.parent)
        full = disk.f_bavail * disk.f_frsize < 1 << 20 or disk.f_favail == 0  # no bytes, or no inodes
        raise OSError(errno.ENOSPC if full else errno.EIO, "No space left on device" if full
                      else "the profiler wrote an incomplete trace", str(trace))  # fmt: skip


class TraceFiles:
    """Where one run's trace, table and memory snapshot go, and how they are written: all or none.

    `write` (from on_trace_ready) leaves them whole in hidden temporaries; `commit` (once the run's output
    is checked) renames them into place; `discard` removes the temporaries. Until `commit`, the files an
    earlier run left under the same names stay as they were, byte for byte; a rename is the one moment a
    name changes hands, and nothing of the suite ever removes a file under a final name.
    """

    def __init__(self, run: Run, tag: str, label: str, work: Work, extra: dict | None = None) -> None:
        self.run, self.tag, self.label, self.work, self.extra = run, tag, label, work, extra or {}
        self.json = run.traces_dir / f"{tag}.json"
        self.txt = run.traces_dir / f"{tag}.txt"
        self.pickle = run.traces_dir / f"{tag}.pickle"  # the CUDA memory snapshot, with --memory on a GPU
        self.table = ""  # the top TABLE_ROWS_PRINTED rows of the key_averages table, for printing
        self.memory: dict | None = None  # GPU memory over the steps (common.harness.memory), None on the CPU
        self.ready: list[tuple[Path, Path]] = []  # (whole temporary, its final name), in the order of the renames
        self.written: dict = {}  # the `suite` metadata the trace's temporary holds (amend changes it)
        for path in (self.json, self.txt):
            if path.is_dir():
                raise SuiteError(f"cannot write {path}: a folder is in the way")

    def write(
        self,
        prof: torch.profiler.profile,
        memory: dict | None,
        snapshot: MemoryWatch | None,
        stopped: Callable[[], str] = str,
        counted: Callable[[int, str | None], None] | None = None,
    ) -> str:
        """Export the trace (with the run's `suite` metadata), the full table and, given `snapshot`, the
        CUDA memory snapshot, each to a hidden temporary beside its final name, for `commit` to rename.

        `stopped()`: what to say of a signal that ended the run ("stopped by Ctrl-C after 2 of 3 profiled steps"),
        '' for none; asked once the profiler's export is done and again at the end, so a signal that came during the
        write is said in both files (the metadata's `stopped` entry, the table's first line). Returns what was said.

        Given `counted` (a run stopped by a signal, which torchrun kills 30 s after it), the table, the steps recorded
        and the label are read from the exported trace (common.harness.trace_table) instead of torch's parse of every
        event, and `counted(steps, label)` is told them before `stopped()` is asked; the table, CPU times only, says
        so under its first line."""
        self.memory = memory
        folder = self.run.traces_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SuiteError(f"cannot write traces to {folder}: {exc.strerror or exc}") from None
        remove_stale_temporaries(folder)
        averages, on_gpu, note = None, self.run.on_gpu, ""
        if counted is None:
            averages = prof.key_averages()
            self.table = key_averages_table(averages, on_gpu, TABLE_ROWS_PRINTED, TEXT_WIDTH)  # the .txt: full names
        temporaries: list[Path] = []
        try:
            with atomic():  # made and remembered together: a hard exit in between would leave one behind
                raw, trace, table, dump = (
                    temporary_beside(p, temporaries) for p in (self.json, self.json, self.txt, self.pickle)
                )
                kineto = raw.with_name(raw.name + ".tmp")  # Kineto writes there first, then renames
                temporaries.append(kineto)
                removed_on_hard_exit(*temporaries)
            prof.export_chrome_trace(str(raw))
            if counted is not None:
                check_whole(raw)
                try:
                    averages, steps, self.label = read_stopped(raw, bool(prof.record_steps))
                except ValueError as exc:  # the reader's one line for a trace it cannot read
                    raise OSError(errno.EIO, str(exc)) from None
                self.extra["steps"], on_gpu, note = steps, False, STOPPED_TABLE
                counted(steps, self.label)
                self.table = key_averages_table(averages, on_gpu, TABLE_ROWS_PRINTED, TEXT_WIDTH)
            if snapshot is not None:
                snapshot.dump_snapshot(dump)
            written = [(table, self.txt), *([(dump, self.pickle)] if snapshot is not None else []), (trace, self.json)]
            for path, _ in written:
                os.chmod(path, normal_mode())  # mkstemp makes 0600; a plain write gives what the umask allows
            said = None
            while said != (now := stopped()):  # once, or twice where a signal came in between; the write's last step
                said = now
                self.extra.pop("stopped", None)
                self.extra.update({"stopped": said} if said else {})
                self.written = self.metadata()
                add_metadata(raw, trace, self.written)
                head = (f"{said}\n" if said else "") + note
                with reopen(table, "w") as out:  # never made anew: a hard exit may have removed it
                    out.write((f"{head}\n" if head else "") + key_averages_table(averages, on_gpu) + "\n")
        except OSError as exc:
            raise SuiteError(f"cannot write {self.json}: {exc.strerror or exc}") from None
        else:
            self.ready = written
            return said
        finally:
            kept = {tmp for tmp, _ in self.ready}
            for tmp in temporaries:
                if tmp not in kept:
                    tmp.unlink(missing_ok=True)
                    forget(tmp)

    def commit(self) -> None:
        """Rename the written temporaries into place, the table (and snapshot) first and the trace last, so
        a new `.json` always has its own `.txt` beside it. All or none: an earlier run's file under a final name
        is kept as a hard link beside it (a copy where the folder takes no links) until the last rename is
        made, and where a rename fails (EPERM, EXDEV) the names renamed before it get their earlier files back
        (or lose the new ones, where there were none). The renames run inside `interrupts.atomic()`: a signal
        cannot come between them (only a SIGKILL can: then the earlier `.json` keeps a new `.txt`)."""
        done: list[tuple[Path, Path | None]] = []  # (final name, its earlier file's keeper) of each rename made
        keepers: list[Path] = []
        final = self.json
        try:
            with atomic():
                try:
                    for tmp, final in self.ready:
                        earlier = _keep_earlier(final)
                        keepers += [earlier] if earlier else []
                        os.replace(tmp, final)
                        forget(tmp)
                        done.append((final, earlier))
                except OSError:
                    _put_back(done)
                    raise
                finally:
                    for keeper in keepers:  # those put back are gone already
                        keeper.unlink(missing_ok=True)
                        forget(keeper)
                self.ready = []
        except OSError as exc:
            self.discard()
            raise SuiteError(f"cannot write {final}: {exc.strerror or exc}") from None

    def amend(self, **entries: object) -> None:
        """Add `entries` to the `suite` metadata of the trace written but not yet committed (a run whose output
        turned out not to match its reference says so there): its temporary is copied with the new metadata."""
        tmp = next((tmp for tmp, final in self.ready if final == self.json), None)
        if tmp is None:
            return
        self.extra.update(entries)
        skip = len(b'{"suite": ' + json.dumps(self.written).encode() + b",")
        with atomic():
            new = temporary_beside(self.json)
            removed_on_hard_exit(new)
        try:
            self.written = self.metadata()
            with tmp.open("rb") as src, reopen(new) as dst:
                src.seek(skip)
                dst.write(b'{"suite": ' + json.dumps(self.written).encode() + b",")
                shutil.copyfileobj(src, dst, 1 << 20)
            os.chmod(new, normal_mode())
            os.replace(new, tmp)
        except OSError as exc:
            raise SuiteError(f"cannot write {self.json}: {exc.strerror or exc}") from None
        finally:
            new.unlink(missing_ok=True)
            forget(new)

    def say_stopped(self, said: str) -> None:
        """A signal that came after this trace was written, before its output was checked: `said` in both files,
        as a stop during the steps is (the metadata's `stopped` entry, the table's first line)."""
        table = next((tmp for tmp, final in self.ready if final == self.txt), None)
        if table is None:
            return
        self.amend(stopped=said)
        try:
            text = table.read_text()
            with reopen(table, "w") as out:  # never made anew: a hard exit may have removed it
                out.write(f"{said}\n{text}")
        except OSError as exc:
            raise SuiteError(f"cannot write {self.txt}: {exc.strerror or exc}") from None

    def metadata(self) -> dict:
        """What the summary reads back from the trace: the run's script, tag, label, device and physics."""
        return {
            "script": self.run.script,
            "tag": self.tag,
            "label": self.label,
            "dtype": self.run.dtype_name,
            "device": self.run.device_name,
            "flops": self.work.flops,
            "bytes": self.work.bytes,
            "shaped_flops": self.work.shaped,
            "memory": self.memory,
            "threads": None if self.run.on_gpu else torch.get_num_threads(),
            **self.extra,
        }

    def discard(self) -> None:
        """Remove the temporaries not yet renamed (the output turned out wrong, or the run ended before it
        was checked). The files under the final names, an earlier run's, are left as they were."""
        for tmp, _ in self.ready:
            tmp.unlink(missing_ok=True)
            forget(tmp)
        self.ready = []
