"""An output folder written as one transaction: all of a run's files appear together, or none do.

:class:`OutputFolder` is checked before any work starts (the folder can be written, holds only files qlinear
wrote, is not the current directory), collects the run's files in a hidden staging folder beside it
(``.OUT.qlinear-new-<pid>-*``), and commits by swapping the two folders in one ``renameat2(RENAME_EXCHANGE)``
system call (Linux); the previous set then sits in the staging folder and is removed. A failing run removes its
staging folder; a killed one leaves it, and the next run on that folder removes it (its process is gone), so the
output folder itself only ever holds a complete old set or a complete new set.

Where the kernel or file system cannot exchange two folders, the commit is two renames (old folder aside as
``.OUT.qlinear-old-*``, staging into place); a kill between them leaves the old set in that folder, and the next run
puts it back before doing anything else.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from qlinear._atomic import describe, dir_mode, file_mode
from qlinear.errors import OutputError

MANIFEST = ".qlinear-outputs.json"
#: files qlinear writes into an output folder (a folder holding anything else is not replaced)
KNOWN = ("model.qdq.onnx", "model.qdq.onnx.data", "model.float.onnx", "model.float.onnx.data", "model.encodings",
         "report.json", "report.html", "model.tflite", MANIFEST)

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2():  # noqa: ANN202
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (``renameat2(RENAME_EXCHANGE)``); False where the system cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OutputError(f"{b}: cannot replace the output folder: {describe(OSError(err, os.strerror(err)))}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _writable(p: Path) -> bool:
    """Writable for this process, and not read-only by intent (no write bit at all: refused even for root)."""
    try:
        mode = p.stat().st_mode
    except OSError:
        return False
    return os.access(p, os.W_OK | os.X_OK) and bool(mode & 0o222)


def _fsync_dir(p: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class OutputFolder:
    """The output folder of a run (see the module docstring).

    ``check()`` before the work, then ``with folder.transaction() as stage:`` write the files into ``stage`` (a
    :class:`~pathlib.Path`); leaving the block without an exception commits them all at once.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        p = Path(path)
        if p.is_symlink():
            p = Path(os.path.realpath(p))
        self.path = Path(os.path.abspath(p))
        self._checked = False

    # ------------------------------------------------------------------------------------------ check
    def check(self) -> None:
        """Raise :class:`OutputError` now if the folder could not be replaced at the end of the run."""
        p = self.path
        if p.exists() and not p.is_dir():
            raise OutputError(f"{p}: exists and is not a folder; choose an output folder (-o)")
        cwd = Path(os.getcwd()).resolve()
        if p.exists() and (cwd == p.resolve() or p.resolve() in cwd.parents):
            raise OutputError(f"{p}: is the current directory (or contains it); qlinear replaces its output folder "
                              "as a whole: choose a new or empty folder, e.g. -o qlinear-out")
        parent = p.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"{parent}: cannot create the output folder's parent: {describe(e)}") from None
        if not _writable(parent):
            raise OutputError(f"{parent}: is not writable, so {p.name} cannot be written there; choose another "
                              "output folder (-o) or fix the permissions")
        self._recover()
        if p.exists():
            if not _writable(p):
                raise OutputError(f"{p}: the output folder is read-only; choose another one (-o) or fix its "
                                  "permissions")
            foreign = self._foreign()
            if foreign:
                shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
                raise OutputError(f"{p}: holds files qlinear did not write ({shown}); qlinear replaces its output "
                                  "folder as a whole, so choose a new or empty folder (-o)")
        self._checked = True

    def _foreign(self) -> list[str]:
        allowed = set(KNOWN)
        m = self.path / MANIFEST
        if m.is_file():
            with contextlib.suppress(OSError, ValueError, TypeError):
                allowed |= {str(n) for n in json.loads(m.read_text("utf-8"))["files"]}
        return sorted(e.name + ("/" if e.is_dir() else "") for e in self.path.iterdir()
                      if e.name not in allowed or e.is_dir())

    def _siblings(self, kind: str) -> list[tuple[Path, int]]:
        out = []
        prefix = f".{self.path.name}.qlinear-{kind}-"
        with contextlib.suppress(OSError):
            for e in self.path.parent.iterdir():
                if e.name.startswith(prefix):
                    with contextlib.suppress(ValueError, IndexError):
                        out.append((e, int(e.name[len(prefix):].split("-")[0])))
        return out

    def _recover(self) -> None:
        """Undo what a killed run left: restore a folder set aside by the two-rename commit, drop stale staging."""
        for old, pid in self._siblings("old"):
            if _alive(pid) and pid != os.getpid():
                continue
            if not self.path.exists():
                os.rename(old, self.path)
            else:
                shutil.rmtree(old, ignore_errors=True)
        for new, pid in self._siblings("new"):
            if not _alive(pid) or pid == os.getpid():
                shutil.rmtree(new, ignore_errors=True)

    # ------------------------------------------------------------------------------------------ write
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Path]:
        if not self._checked:
            self.check()
        try:
            stage = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.qlinear-new-{os.getpid()}-",
                                          dir=self.path.parent))
        except OSError as e:
            raise OutputError(f"{self.path.parent}: cannot create a staging folder: {describe(e)}") from None
        try:
            yield stage
            self._commit(stage)
        except BaseException as e:
            shutil.rmtree(stage, ignore_errors=True)
            if isinstance(e, OSError) and not isinstance(e, OutputError):
                raise OutputError(f"{self.path}: cannot write the outputs: {describe(e)}") from None
            raise

    def _commit(self, stage: Path) -> None:
        files = sorted(e.name for e in stage.iterdir())
        (stage / MANIFEST).write_text(json.dumps({"files": files + [MANIFEST]}), "utf-8")
        fmode = file_mode()
        for name in files + [MANIFEST]:
            f = stage / name
            os.chmod(f, fmode)
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.chmod(stage, dir_mode())
        _fsync_dir(stage)
        if not self.path.exists():
            os.rename(stage, self.path)
        elif exchange(stage, self.path):
            shutil.rmtree(stage, ignore_errors=True)  # now the previous set
        else:
            old = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.qlinear-old-{os.getpid()}-",
                                        dir=self.path.parent))
            os.rmdir(old)
            os.rename(self.path, old)
            os.rename(stage, self.path)
            shutil.rmtree(old, ignore_errors=True)
        _fsync_dir(self.path.parent)


__all__ = ["KNOWN", "MANIFEST", "OutputFolder", "exchange"]
