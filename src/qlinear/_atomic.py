"""Atomic file output: write to a temporary file in the target's directory, then rename over the target.

A failure at any point (exception, interrupt, full disk) leaves an existing file untouched and no partial file
behind. Files get the permissions the user's umask gives (``0666 & ~umask``), as ``open()`` would, not the 0600 of
:func:`tempfile.mkstemp`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from qlinear.errors import OutputError


def umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux ``/proc``), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def file_mode() -> int:
    """Mode of a new regular file under the current umask."""
    return 0o666 & ~umask()


def dir_mode() -> int:
    """Mode of a new folder under the current umask."""
    return 0o777 & ~umask()


def describe(e: OSError) -> str:
    """A short reason for an OS error, with the fix where there is an obvious one."""
    import errno

    why = e.strerror or str(e)
    if e.errno == errno.ENOSPC:
        return f"{why} (free some space or write elsewhere)"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{why} (the folder is not writable: choose another output folder or fix its permissions)"
    return why


def check_target(target: Path) -> Path:
    """The folder ``target`` will be written into; raises :class:`OutputError` if it cannot be a file there."""
    directory = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise OutputError(f"{target}: is a folder; give a file name to write to (e.g. {target / 'out'})")
    if not directory.is_dir():
        raise OutputError(f"{target}: cannot write: folder {directory} does not exist")
    return directory


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8") -> Iterator[IO]:
    """``with atomic_open(path) as f: f.write(...)``: the file appears complete at ``path`` or not at all."""
    target = Path(path)
    directory = check_target(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise OutputError(f"{target}: cannot write: {describe(e)}") from None
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, OutputError):
            raise OutputError(f"{target}: cannot write: {describe(e)}") from None
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)
