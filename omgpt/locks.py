"""Run folders kept to one live process.

:func:`holding` locks a folder for the life of a process (an ``fcntl`` lock, which the kernel releases
however the process ends, so a killed holder blocks no one): two fits logging to one folder, or two
tunings merging into one file, are refused or wait instead of interleaving their files.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from omgpt.errors import OMGPTError


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
