"""How many intra-op threads torch uses in a command that trains or evaluates, and how they wait.

The models here are small (the demo's: 4 layers, 64 dims), so every parallel region is short, and a
thread that waits for the others at its end decides what a second process does to us. With OpenMP's
default wait (spin, then sleep) two threads on a 2-core machine collapse beside one busy process:
each region waits for a thread that the other process has descheduled (the demo fell from
~17 to 0.65-2.4 steps/s). With a passive wait -- a waiting thread sleeps at once and leaves its core
to whoever needs it -- they do not: measured by ``benchmarks/threads.py`` on the shared 2-core
machine, two passive threads trained the demo and a T = 100 fit 6-9x faster than two default ones,
and no slower than one thread, on the loaded machine and beside a busy process (``benchmarks/RESULTS.md``).

So the command line makes OpenMP wait passively (unless ``OMP_WAIT_POLICY`` says otherwise), and then
uses every CPU this process may run on -- its CPU affinity, capped by a cgroup CPU quota (a
container's ``--cpus``). Where the wait is not passive -- a policy set by the user, or a process that
loaded torch before :func:`passive_on_the_command_line` could set it (a notebook calling
``cli_main``) -- it uses half of them, at least one: one thread on a 2-core machine, the other core
left to whatever else runs. ``--threads N`` on the command line, ``OMGPT_THREADS=N`` in the
environment, or an explicit ``OMP_NUM_THREADS`` overrides the count.

OpenMP reads its wait policy once, when torch is first imported -- and ``import omgpt`` imports torch
-- so :func:`passive_on_the_command_line` runs first thing in ``omgpt/__init__.py``, for the
``omgpt`` command and ``python -m omgpt`` only (a library user's process is left as it is).
Every command that trains or evaluates (fit, validate, demo, evaluate, tune, experiment) calls
:func:`configure` once, at start, through :func:`omgpt.commands.cli.cli_main`; a process it starts
for a background fit gets its thread count through :func:`child_env`.

Within that count, :func:`omgpt.rollout.rollout` plays a policy that declares ``cpu_threads`` (OMGPT,
ERM, ``alg-star``'s structured samplers) on at most that many threads (:func:`at_most`): a rollout's
per-step work is too small for a second thread (``benchmarks/rollout_threads.py``).
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from omgpt.errors import OMGPTError

ENV = "OMGPT_THREADS"
_configured: int | None = None  # the count configure() chose in this process (printed once)
_passive = False  # whether OpenMP in this process waits passively: the policy was set before torch loaded it


def passive_on_the_command_line() -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` unless set, when this process is the ``omgpt`` command (the console
    script, or ``python -m omgpt``: ``sys.argv[0]`` is ``-m`` while the package is located) and torch
    is not loaded yet. Called by ``omgpt/__init__.py`` before anything imports torch."""
    global _passive
    if "torch" in sys.modules:
        return
    if Path(sys.argv[0]).name == "omgpt" or sys.argv[:1] == ["-m"]:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    _passive = os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, capped by the cgroup's CPU quota (rounded up)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_quota()
    return max(1, min(cpus, math.ceil(quota)) if quota else cpus)


def _cgroup_quota() -> float | None:
    """CPUs' worth of time the cgroup allows per period (cgroup v2 ``cpu.max``, v1 ``cfs_quota_us``), or None."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def choose(threads: int | None = None) -> tuple[int, str]:
    """``(count, why)``: ``threads`` if given, else ``$OMGPT_THREADS``, else ``$OMP_NUM_THREADS``, else
    the usable CPUs where OpenMP waits passively, half of them (at least one) where it does not."""
    for value, source in (
        (threads, "--threads"),
        (os.environ.get(ENV), ENV),
        (os.environ.get("OMP_NUM_THREADS"), "OMP_NUM_THREADS"),
    ):
        if value is not None and value != "":
            return _count(value, source), f"from {source}"
    cpus = usable_cpus()
    if _passive:
        return cpus, f"the {cpus} CPU{'s' if cpus > 1 else ''} this process may use"
    return max(
        1, cpus // 2
    ), f"half of the {cpus} CPU{'s' if cpus > 1 else ''} this process may use: OpenMP does not wait passively"


def configure(threads: int | None = None, announce: bool = True) -> int:
    """Set torch's intra-op threads for this process and print the choice once (stdout); returns the
    count. (DataLoader workers run one thread each anyway; a background fit gets its count through
    :func:`child_env`.)"""
    global _configured
    n, why = choose(threads)
    if threads is not None:  # and for the processes this one starts (DDP's other ranks re-run the command without it)
        os.environ[ENV] = str(n)
    import torch

    torch.set_num_threads(n)
    # DDP's other ranks run the same command again: one line from rank 0 is enough.
    if announce and _configured is None and os.environ.get("LOCAL_RANK", "0") == "0":
        wait = os.environ.get("OMP_WAIT_POLICY", "unset").lower()
        # on stdout, with the commands' other progress lines: stderr holds nothing but an error's one line
        print(
            f"omgpt: {n} torch thread{'s' if n > 1 else ''} ({why}; --threads N or {ENV}=N to change), OpenMP wait policy {wait}",
            flush=True,
        )
    _configured = n
    return n


def _count(value, source: str) -> int:
    """``value`` as a thread count, or :class:`OMGPTError` naming ``source``."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise OMGPTError(f"{source} must be a positive number of threads, got {value!r}")
    return n


def child_env(threads: int) -> dict[str, str]:
    """The environment of an ``omgpt`` subprocess that must use ``threads`` threads (a background fit)."""
    return {**os.environ, ENV: str(threads), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def split_argv(argv: list[str]) -> tuple[list[str], int | None]:
    """``argv`` without ``--threads N`` / ``--threads=N``, and ``N`` (None when absent)."""
    rest, threads, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--threads" or arg.startswith("--threads="):
            value = arg.partition("=")[2] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in arg else 2
            threads = _count(value, "--threads")
            continue
        rest.append(arg)
        i += 1
    return rest, threads


@contextmanager
def at_most(threads: int | None):
    """Run the block with at most ``threads`` intra-op threads (``None``: as configured), then restore
    the count. For work whose parallel regions are too small to pay for their fork and join: an
    online rollout of a trained network decodes one token per environment per step, and plays 2.4x
    faster on one thread than on two (``benchmarks/rollout_threads.py``)."""
    import torch

    before = torch.get_num_threads()
    if threads is None or before <= threads:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
