"""Files the suite writes, written as a normal write would leave them, but whole: the mode the umask gives
(not mkstemp's 0600), and under the final name only once every byte is on disk. No torch here."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


def write_whole(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a hidden temporary beside it, flushed to disk, then renamed: a full disk
    leaves the old file or none, never a truncated one under the final name; the OSError names `path`."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
