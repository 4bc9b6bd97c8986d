"""Files written so that a crash or a concurrent run never leaves a damaged one, and checkpoints read so
that a file cannot run code.

* :func:`atomic_write` is the one way every output and every checkpoint reaches the disk: the bytes
  go to a temporary file of a unique name in the target's own folder (so the final rename never
  crosses a filesystem), are flushed to disk (``fsync``), and replace the target with ``os.replace``
  -- a reader, a later resume or a second process sees the old file or the new one, never a mix.
  A temporary name carries its writer's host and pid (``.last.ckpt.HOST-PID.XXXXXXXX.tmp``): what a
  killed writer left is removed by the next write into the folder, never what a live one is writing.
* :func:`output_folder` builds a command's output folder (``--out``) as a unit: everything is written
  into a sibling temporary folder, which then takes the folder's place. Two commands writing the same
  ``--out`` each install a complete folder; the last one wins.
* :func:`holding` keeps a run folder to one live process (a lock held for the process's life, so a
  killed holder does not block).
* :func:`read_checkpoint` is the one checkpoint reader: always ``weights_only=True`` (whatever the
  torch version's default), so a checkpoint holds tensors and plain data, never code; every failure is
  an :class:`OMGPTError` (one line). :class:`SafeCheckpointIO` puts both into Lightning, so ``omgpt
  fit|validate`` save and resume (``--ckpt_path`` paths and the ``last``/``best``/``hpc``
  aliases alike) through them.
"""
from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import math
import os
import pickle
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import torch

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
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # gone after a failure (and after the install)


def _check_replaceable(out: Path, produces: tuple[str, ...], command: str) -> None:
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_dir():
        raise OMGPTError(f"{command}: --out {out} exists and is not a folder")
    foreign = sorted(p.name for p in out.iterdir() if not p.is_file() or not any(fnmatch.fnmatch(p.name, g) for g in produces))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OMGPTError(f"{command}: --out {out} holds files it does not write ({shown}); choose a new or empty folder")


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


# --------------------------------------------------------------------------------------------------
# Run folders.
def lock_file(folder: str | Path) -> Path:
    """The lock of ``folder``: beside it, not in it (Lightning's CSV logger warns that it will delete
    "previous log files" of a folder that is not empty when it starts, and a fit's lock is there first)."""
    folder = Path(folder)
    return folder.with_name(f".{folder.name}.lock")


@contextlib.contextmanager
def holding(folder: str | Path, refusal: str, wait: bool = False) -> Iterator[Path]:
    """``with holding(run_dir, "choose another version"):`` -- ``folder`` is this process's until the
    block ends; a second process asking for it gets :class:`OMGPTError` (naming the holder's pid, then
    ``refusal``) instead of interleaving its files with the first's. With ``wait``, the second process
    waits for the first to finish instead (a short read-merge-write of a shared file: a tuned file).

    The lock is an ``fcntl`` lock on :func:`lock_file`: the kernel releases it when its process ends,
    however it ends, so the file a killed process leaves blocks no one. (Without ``fcntl`` -- Windows
    -- the folder is not locked.)"""
    folder = Path(folder)
    try:
        import fcntl
    except ImportError:
        yield folder
        return
    path = lock_file(folder)
    made = [p for p in path.parents if not p.exists()]  # removed again if left empty
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise OMGPTError(f"{folder} is in use by another live process (pid {holder}); {refusal}") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder released and removed the file between our open and our lock: again
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield folder
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # while still locked: a process waiting on this file sees it gone and retries
        os.close(fd)
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()  # only if empty: a run that wrote nothing leaves no folder


# --------------------------------------------------------------------------------------------------
# Checkpoints.
def read_checkpoint(path: str | Path, map_location: Any = "cpu", mmap: bool = False) -> dict:
    """A Lightning checkpoint, read with ``weights_only=True`` always: tensors and plain data only, so
    a malicious file cannot run code. Missing, truncated, unsafe or foreign files raise
    :class:`OMGPTError` naming the file."""
    path = str(path)
    if not os.path.isfile(path):
        raise OMGPTError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL (\S+)", str(e))  # weights_only refused to build this Python object
        if found:
            raise OMGPTError(f"refusing to load checkpoint {path}: it would call {found.group(1)}; a checkpoint holds only tensors and plain data") from None
        raise OMGPTError(f"cannot read checkpoint {path} (UnpicklingError); is the file complete?") from None
    except Exception as e:  # truncated, corrupted, or not a torch file at all
        raise OMGPTError(f"cannot read checkpoint {path} ({type(e).__name__}); is the file complete?") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise OMGPTError(f"{path} is not a Lightning checkpoint (no state_dict)")
    return ckpt


def export_weights(ckpt: str | Path, out: str | Path) -> Path:
    """Weights and hyper-parameters of a Lightning checkpoint, nothing else (no optimizer state, so it
    stays small enough to commit), written atomically to ``out``; ``omgpt evaluate --ckpt`` reads it."""
    full = read_checkpoint(ckpt)
    slim = {"state_dict": full["state_dict"], "hyper_parameters": full["hyper_parameters"], "global_step": full.get("global_step")}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(out, lambda f: torch.save(slim, f))


def _safe_checkpoint_io() -> type:
    from lightning.fabric.plugins import TorchCheckpointIO

    class SafeCheckpointIO(TorchCheckpointIO):
        """Lightning's checkpoint IO through :func:`atomic_write` and :func:`read_checkpoint` (local files)."""

        def save_checkpoint(self, checkpoint: dict, path, storage_options: Any | None = None) -> None:
            if storage_options is not None:
                raise TypeError(f"{type(self).__name__} takes no storage_options")
            try:
                atomic_write(path, lambda f: torch.save(checkpoint, f))
            except (OSError, RuntimeError) as e:  # a full disk: torch says "PytorchStreamWriter failed writing file"
                reason = e.strerror if isinstance(e, OSError) and e.strerror else (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise OMGPTError(f"cannot save checkpoint {path} (disk full?): {reason}; "
                                 f"any earlier {Path(path).name} is unchanged") from None

        def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict:
            # weights_only is True whatever the caller asks: no path loads a checkpoint that can run code.
            return read_checkpoint(path, map_location)

    SafeCheckpointIO.__module__, SafeCheckpointIO.__qualname__ = __name__, "SafeCheckpointIO"
    return SafeCheckpointIO


def __getattr__(name: str):
    # SafeCheckpointIO subclasses a Lightning class, so it is built on first use: reading a checkpoint
    # (omgpt.load_model, omgpt.Agent) never imports Lightning.
    if name == "SafeCheckpointIO":
        globals()[name] = cls = _safe_checkpoint_io()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
