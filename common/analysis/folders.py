"""The traces a summary's paths name, and their reading: a folder searched, a process per usable core, a trace
that cannot be read one notice, Ctrl-C ending every worker before it goes on.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import signal
import stat
import sys
from pathlib import Path

from common import interrupts
from common.analysis.digest import Digest, read_digest
from common.cli import SuiteError, notice
from common.files import not_a_file


def _is_trace_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith((".json", ".json.gz"))


def traces_in(folder: Path) -> list[Path] | None:
    """The trace files under `folder`, its subfolders searched (links to folders are not followed), sorted; None
    when `folder` itself cannot be read. A subfolder that cannot be read or searched (no permission) is skipped
    with a notice, and the rest is still searched."""
    found: list[Path] = []
    pending = [folder]
    while pending:
        here = pending.pop()
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError as exc:
            if here == folder:
                notice(f"{here}: this folder cannot be read ({exc.strerror or exc}), skipped")
                return None
            notice(f"{here}: a folder that cannot be read ({exc.strerror or exc}), skipped")
            continue
        inside: list[Path] = []
        folders: list[Path] = []
        try:
            for entry in entries:
                mode = entry.stat(follow_symlinks=False).st_mode  # EACCES: listed, but no permission to search
                if stat.S_ISDIR(mode):
                    folders.append(Path(entry.path))
                elif _is_trace_name(entry.name) and (stat.S_ISREG(mode) or os.path.isfile(entry.path)):
                    inside.append(Path(entry.path))
        except OSError as exc:
            notice(f"{here}: a folder that cannot be searched ({exc.strerror or exc}), skipped")
            continue
        found += inside
        pending += folders
    return sorted(found)


def find_traces(paths: list[str]) -> list[Path]:
    """The trace files named by `paths`, folders searched (sorted) for *.json and *.json.gz; no duplicates.
    A folder without traces, or one that cannot be read, is skipped with a notice; no traces at all is an error."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if os.path.isdir(path):  # os.path's: False, not an error, where the path cannot be looked at
            inside = traces_in(path)
            if inside == []:
                notice(f"{path}: no *.json or *.json.gz traces in this folder, skipped")
            found += inside or []
        elif os.path.isfile(path):
            found.append(path)
        else:  # e.g. the folder of a script not run yet, a pipe or a device: the other paths still count
            notice(f"{path}: {not_a_file(path)}, skipped")
    if not found:
        raise SuiteError(f"no traces in {', '.join(paths)}")
    return list(dict.fromkeys(p.resolve() for p in found))


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, as taskset or a container's cpuset sets it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _ignore_interrupts() -> None:
    """A worker leaves Ctrl-C to the main process, which ends the workers itself: no traceback from them. The
    signals were blocked while the worker was forked (one sent then waits); here Ctrl-C is ignored and SIGTERM and
    SIGHUP end a worker silently, then they are unblocked; a worker ends with the main process. A worker forked
    with them unblocked ran the main process's handler until here: pool.terminate()'s SIGTERM in that window raised
    in the worker, and multiprocessing printed its traceback."""
    interrupts.in_worker()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(interrupts.SIGNALS))


def _read_in_parallel(paths: list[Path], args: argparse.Namespace, workers: int) -> list[Digest | str]:
    """read_digest of each path, a process per core, in the order of `paths`. Ctrl-C (or any failure) ends
    every worker before it goes on: no process is left behind. While the workers start, SIGINT is blocked, so a
    Ctrl-C then reaches neither a worker that does not ignore it yet nor a pool half made: it waits, and lands once
    the pool can be ended; SIGTERM and SIGHUP the same."""
    start = "fork" if sys.platform == "linux" else None  # fork: the workers need not import the reader again
    masks = hasattr(signal, "pthread_sigmask")
    pool = None
    try:
        if masks:
            signal.pthread_sigmask(signal.SIG_BLOCK, set(interrupts.SIGNALS))
        try:
            pool = multiprocessing.get_context(start).Pool(workers, initializer=_ignore_interrupts)
        finally:
            if masks:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, set(interrupts.SIGNALS))
        results = list(pool.imap(functools.partial(read_digest, args=args), paths))
        pool.close()
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    finally:
        if pool is not None:
            pool.join()
    return results


def read_all(paths: list[Path], args: argparse.Namespace) -> list[Digest]:
    """The Digest of each trace of `paths`, in order: read in this process for one file, else a process per usable
    core (the output is the same). One that cannot be read gets one `notice:` line on stderr naming it and why, and
    the others are still read; SuiteError when none could be (the one line of a single file's why)."""
    workers = min(len(paths), usable_cores())
    if workers > 1:
        from common.reader.trace_json import say_fallback

        say_fallback()  # once here, not once per worker
        results = _read_in_parallel(paths, args, workers)
    else:
        results = [read_digest(path, args) for path in paths]
    traces = []
    for result in results:
        if isinstance(result, Digest):
            traces.append(result)
        elif len(paths) == 1:
            raise SuiteError(result)
        else:
            notice(f"{result}; skipped")
    if not traces:
        raise SuiteError(f"none of the {len(paths)} traces could be read (each one's why is above)")
    return traces
