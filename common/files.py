"""Files the suite writes, written as a normal write would leave them, but whole: the mode the umask gives
(not mkstemp's 0600), and under the final name only once every byte is on disk; and what a path the suite is
asked to read is, when it is not a regular file. No torch here."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import IO

_KINDS = [(stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")]  # fmt: skip


def kind_of(mode: int) -> str:
    """What a file of `mode` (st_mode) is, in words: 'a named pipe', 'a character device', ..., 'a regular file'."""
    other = "a regular file" if stat.S_ISREG(mode) else "a file of an unknown kind"
    return next((kind for test, kind in _KINDS if test(mode)), other)


def not_a_file(path: Path, missing: str = "no such file or folder") -> str | None:
    """Why `path` cannot be read as a file, in words (`missing`, 'a folder, where a trace file was wanted', 'not a
    regular file (a character device)'), or None for a regular file. Only stat: a named pipe is never opened
    (opening one waits for a writer)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return missing if not path.is_symlink() else f"a link to {os.readlink(path)}, which does not exist"
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder, where a trace file was wanted"
    link = f", through a link to {os.path.realpath(path)}" if path.is_symlink() else ""
    return f"not a regular file ({kind_of(mode)}{link})"


def shown_path(path: Path) -> Path:
    """`path` as a reader would type it here: relative to the working directory where it lies below it."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def normal_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0o666 less the umask (reading it means setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def reopen(path: Path, mode: str = "wb") -> IO:
    """A temporary the suite made (mkstemp) opened again to be written from its start, never created anew: where a
    second Ctrl-C's hard exit (common.interrupts) removed it while this open was on its way into the kernel, the
    open fails (FileNotFoundError) instead of leaving a new file behind the exiting process. `mode`: "wb" or "w"."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_TRUNC), mode)


def write_whole(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a hidden temporary beside it, flushed to disk, then renamed: a full disk
    leaves the old file or none, never a truncated one under the final name; the OSError names `path`."""
    try:  # the temporary is the suite's business: an error names the file the user asked for
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(name, normal_mode())
        os.replace(name, path)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        Path(name).unlink(missing_ok=True)
