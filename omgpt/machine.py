"""What this machine has free: the memory a process can still allocate on a device, probed where the
operating system tells it (``/proc/meminfo``, the ``ulimit -v`` address-space limit, CUDA's free memory).
:func:`omgpt.checks.memory` refuses work estimated to need more than this, before the work starts.
"""

from __future__ import annotations

import os

import torch


def free_memory(dev: torch.device | str) -> int | None:
    """Bytes that can be allocated on ``dev`` now (``None`` where that cannot be told). On the CPU, the
    smaller of the machine's available RAM and what the process's address-space limit leaves."""
    dev = torch.device(dev)
    if dev.type == "cuda":
        return torch.cuda.mem_get_info(dev)[0]
    if dev.type != "cpu":
        return None
    known = [n for n in (_available_ram(), _address_space_left()) if n is not None]
    return min(known) if known else None


def _available_ram() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _address_space_left() -> int | None:
    """What ``ulimit -v`` (``RLIMIT_AS``) leaves: the limit less the address space the process maps
    already (its ``VmSize``; torch's libraries alone map a good part of a few GiB). With a limit
    set, an allocation past it fails, or the process is killed, however much RAM is free."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError, IndexError):  # no resource module (Windows), no /proc (macOS)
        return None
    return max(limit - mapped, 0)
