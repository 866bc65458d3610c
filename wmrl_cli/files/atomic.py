"""Files written whole or not at all: a temp path in the same directory, then a rename.

A failed write (a full disk, an I/O error, a read-only mount) leaves the previous file or
folder as it was and raises `WriteError`: one line with the path and the cause, which the CLI
prints without a traceback. Running the command again resumes from what was kept.

What is written honours the umask (0644 files, 0755 folders under umask 022), as a plain
`open` would: `tempfile` makes its files and folders private (0600, 0700), and renaming one into
place would keep that mode, so that other users of a shared project could not read a run.
A folder replaced whole keeps the files the user put in it (`keep_when_replaced`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from wmrl_cli.errors import WmrlError


class WriteError(WmrlError):
    """A write the operating system refused (no space, I/O error, read-only, permission)."""


def _cause(exc: BaseException, path: Path) -> str:
    """The reason a write failed, in words. Writers that wrap the OS call (torch.save's C++
    stream: `basic_ios::clear: iostream error`) lose errno; a full disk is then read off the
    file system."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{os.strerror(exc.errno)} (errno {exc.errno})"
    with contextlib.suppress(OSError):
        probe = path if path.exists() else path.parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if shutil.disk_usage(probe).free < 2**20:
            return f"{os.strerror(errno.ENOSPC)} (errno {errno.ENOSPC})"
    return str(exc) or type(exc).__name__


# The errors of the machine rather than of wmrl: a command stopped by one ends in one line.
_ENVIRONMENT_ERRNOS = {
    errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM,
    errno.EMFILE, errno.ENFILE, errno.EFBIG,
}  # fmt: skip


def environment_error(exc: BaseException) -> WriteError | None:
    """A write error from anywhere (a writer not made atomic, a library's own file) as the one
    line `write_failed` gives; None for an error that is not the machine's (a bug: keep its
    traceback)."""
    if isinstance(exc, WriteError):
        return exc
    if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:
        return write_failed(exc.filename or "a file", exc)
    if isinstance(exc, RuntimeError) and _is_write_error(exc):
        return write_failed("a file", exc)
    return None


def write_failed(path: str | Path, exc: BaseException) -> WriteError:
    """The one-line error for a failed write of `path`."""
    return WriteError(
        f"cannot write {path}: {_cause(exc, Path(path))}; nothing half-written was kept: free "
        "the space (or fix the cause) and run the same command again to resume"
    )


# torch.save and other C++ writers raise RuntimeError for a failed stream.
_WRITE_ERRORS = (OSError, RuntimeError)
_STREAM_WORDS = ("iostream", "stream", "write", "file", "space")


def _is_write_error(exc: BaseException) -> bool:
    """An OSError, or a C++ writer's RuntimeError about its stream (not a bug elsewhere). Only
    the message's first line is read: an error that carries another process's traceback (a
    simulator worker's) names "File" in every frame, and is not a write's."""
    if isinstance(exc, OSError):
        return True
    first = str(exc).lower().split("\n", 1)[0]
    return isinstance(exc, RuntimeError) and any(w in first for w in _STREAM_WORDS)


def umask() -> int:
    """The process's umask, read without changing it where Linux reports it (setting it to read
    it would race with files other threads create meanwhile)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_file_beside(path: Path) -> tuple[int, str]:
    """(fd, name) of a new temp file in `path`'s folder, with the mode a plain `open` would give
    (tempfile's are 0600)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, 0o666 & ~umask())
    return fd, tmp


def share(path: Path) -> None:
    """Give `path`, and all under it when a folder, the mode the umask gives a new file or
    folder (an executable file keeps its execute bits): what a library made private (safetensors
    writes through a 0600 temp file) becomes readable as a plain `open` would have made it."""
    mask = umask()
    for item in [path, *(path.rglob("*") if path.is_dir() else [])]:
        if item.is_symlink():
            continue
        executable = item.is_dir() or item.stat().st_mode & 0o111
        os.chmod(item, (0o777 if executable else 0o666) & ~mask)


def save_tensors(tensors: dict, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors' `save_file`, with the mode the umask gives."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    share(Path(path))


def atomic_write_bytes(path: str | Path, write: Callable[[Any], Any]) -> None:
    """`write(handle)` into a temp file beside `path`, then rename it to `path`."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_file_beside(path)
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    except _WRITE_ERRORS as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if not _is_write_error(exc):
            raise
        raise write_failed(path, exc) from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, lambda handle: handle.write(text.encode()))


# The user's files inside run folders (absolute paths, from each run's ownership record): a
# folder that `atomic_dir` replaces carries them into its new copy.
_KEPT: set[Path] = set()


def keep_when_replaced(paths: Iterable[Path]) -> None:
    """Files that a replaced folder holding them carries into its replacement (the user's
    README.md in a run's policy/, say): wmrl rewrites its own files, never the user's."""
    _KEPT.update(Path(path).absolute() for path in paths)


def _carry_kept(final: Path, tmp: Path) -> None:
    where = final.absolute()
    for path in sorted(_KEPT):
        if not path.is_relative_to(where) or not path.exists():
            continue
        target = tmp / path.relative_to(where)
        if not target.exists():  # a file wmrl writes now under the user's name stays wmrl's
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)


@contextlib.contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """Yields an empty temp folder beside `final`; when the block ends without an error the
    folder replaces `final` (an older `final` is removed only then, the user's files in it
    carried over), else it is removed and `final` is left as it was. An OS error inside the
    block becomes a `WriteError`."""
    final = Path(final)
    tmp = final.parent / f".tmp-{final.name}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        yield tmp
        old = final.parent / f".old-{final.name}"
        share(tmp)  # written by libraries too (safetensors, peft): modes as the umask gives
        if final.exists():
            _carry_kept(final, tmp)
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except _WRITE_ERRORS as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if not _is_write_error(exc):
            raise
        raise write_failed(final, exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
