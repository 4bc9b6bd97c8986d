"""Files written so that a crash or a concurrent run never leaves a damaged one.

* :func:`atomic_write` is the one way every output and every checkpoint reaches the disk: the bytes
  go to a temporary file of a unique name in the target's own folder (so the final rename never
  crosses a filesystem), are flushed to disk (``fsync``), and replace the target with ``os.replace``
  -- a reader, a later resume or a second process sees the old file or the new one, never a mix.
  A temporary name carries its writer's host and pid (``.last.ckpt.HOST-PID.XXXXXXXX.tmp``): what a
  killed writer left is removed by the next write into the folder, never what a live one is writing.
* :func:`output_folder` builds a command's output folder (``--out``) as a unit: everything is written
  into a sibling temporary folder, which then takes the folder's place. Two commands writing the same
  ``--out`` each install a complete folder; the last one wins.

Beside it: :mod:`omgpt.locks` keeps a run folder to one live process; :mod:`omgpt.checkpoints` reads
checkpoints so that a file cannot run code (and writes the slim ones through :func:`atomic_write`);
:mod:`omgpt.checkpoint_io` puts both into Lightning.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import math
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from omgpt.errors import OMGPTError

_UMASK = os.umask(0)  # read once (setting it is the only way to read it); temp files get the usual modes
os.umask(_UMASK)


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write ``path`` atomically: ``write(f)`` fills a temporary file beside it, which is fsynced and
    renamed over ``path``. On any failure the temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno is not None and e.filename is None:
            # a write into the open file (disk full, a file-size limit) names no file: name the target
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise
    _fsync_folder(path.parent)  # the rename itself survives a power loss
    return path


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text.encode()))


def write_json(obj: Any, path: str | Path, indent: int | None = 2) -> Path:
    """JSON as the standard defines it: a non-finite number (which ``json.dumps`` would write as the
    invalid ``NaN``) becomes ``null``; numpy and torch values become numbers and lists."""
    return write_text(path, json.dumps(_plain(obj), indent=indent, allow_nan=False) + "\n")


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):  # numpy / torch scalars and arrays
        return _plain(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG, atomically, and close it."""
    import matplotlib.pyplot as plt

    try:
        return atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi))
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------------
# Temporary names: whose they are, and which are left over.
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def _temp_prefix(target: Path) -> str:
    """``.NAME.HOST-PID.``: the pid is read at every call (a forked child writes under its own)."""
    return f".{target.name}.{_host()}-{os.getpid()}."


_TEMP = re.compile(r"^\..+\.(?P<host>\w+)-(?P<pid>\d+)\.\w+\.(tmp|old)$")  # mkstemp's random part is \w+


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale(folder: str | Path) -> None:
    """Remove the temporary files and folders in ``folder`` that a killed writer on this host left
    (named by :func:`_temp_prefix`, their pid no longer running). A live writer's are kept, and so
    are other hosts' (on a shared filesystem their pids mean nothing here)."""
    host, me = _host(), os.getpid()
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            found = _TEMP.match(entry.name)
            if not found or found["host"] != host or int(found["pid"]) == me or _alive(int(found["pid"])):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened and synced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------------------------------
# Output folders.
@contextlib.contextmanager
def output_folder(out: str | Path, produces: tuple[str, ...], command: str) -> Iterator[Path]:
    """``with output_folder(out, ("summary.json", "*.png"), "omgpt evaluate") as folder:`` -- write
    every file into ``folder``; on success it becomes ``out`` as a whole, on failure it is removed and
    ``out`` is left as it was.

    ``out`` may be new, empty, or an earlier output of the same command (every entry matches
    ``produces``), which is replaced; anything else is refused before any work starts, so a command
    never deletes files it did not write. Creating the temporary folder up front also finds an
    unwritable ``out`` before the work, not after it."""
    out = Path(out).absolute()  # ("." has no name to put a sibling beside)
    _check_replaceable(out, produces, command)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(out.parent)  # what a killed command left beside its --out
        stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=_temp_prefix(out), suffix=".tmp"))
    except OSError as e:
        raise OMGPTError(f"{command}: cannot write --out {out}: {e.strerror or e}") from None
    try:
        os.chmod(stage, 0o777 & ~_UMASK)
        yield stage
        _check_replaceable(out, produces, command)  # nothing foreign appeared meanwhile
        _install(stage, out)
    except OSError as e:  # a file of the stage that could not be written: named as the user knows it, under out
        staged = Path(e.filename) if isinstance(e.filename, str) else None
        if staged is None or e.errno is None or not staged.is_relative_to(stage):
            raise
        raise OSError(e.errno, e.strerror, str(out / staged.relative_to(stage))) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # gone after a failure (and after the install)


def _check_replaceable(out: Path, produces: tuple[str, ...], command: str) -> None:
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_dir():
        raise OMGPTError(f"{command}: --out {out} exists and is not a folder")
    foreign = sorted(
        p.name for p in out.iterdir() if not p.is_file() or not any(fnmatch.fnmatch(p.name, g) for g in produces)
    )
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OMGPTError(
            f"{command}: --out {out} holds files it does not write ({shown}); choose a new or empty folder"
        )


def _install(stage: Path, out: Path) -> None:
    """Rename ``stage`` to ``out``; an existing ``out`` is first renamed aside, then deleted. If another
    process installs its folder in between, the rename fails and the loop sets that one aside too."""
    while True:
        try:
            os.rename(stage, out)  # atomic; succeeds when out is absent (or an empty folder)
            break
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=_temp_prefix(out), suffix=".old"))
        try:
            os.rename(out, old / out.name)
        except FileNotFoundError:
            pass  # the other process moved it first
        shutil.rmtree(old, ignore_errors=True)
    _fsync_folder(out.parent)


def writable_file(path: str | Path, option: str) -> Path:
    """Check, before a long run, that ``path`` can be written later (its folder is created if needed)."""
    path = Path(path)
    if path.is_dir():
        raise OMGPTError(f"{option} {path} is a folder, not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise OMGPTError(f"cannot write {option} {path}: {e.strerror or e}") from None
    return path
