"""A progress line for long work (``omgpt experiment``'s fits and panels, ``omgpt tune``'s benchmarks):
``what: done/total, elapsed, about how long is left``, one line each time a unit of work ends, on a
terminal only -- output sent to a file or a pipe (logs, CI) stays as it was."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


class Progress:
    """Counts ``total`` units of ``what`` (e.g. ``"models trained"``) and, on a terminal, writes after each
    one ``[what: 3/10, 12:03 elapsed, ~20:05 left]`` to ``stream`` (default standard error): the time
    left is the mean time per unit so far times the units left."""

    def __init__(self, total: int, what: str, stream: TextIO | None = None):
        self.total, self.what, self.done = int(total), what, 0
        self.stream = sys.stderr if stream is None else stream
        self.live = self.total > 0 and bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.start
        left = f", ~{_clock(elapsed / self.done * (self.total - self.done))} left" if 0 < self.done < self.total else ""
        return f"[{self.what}: {self.done}/{self.total}, {_clock(elapsed)} elapsed{left}]"

    def advance(self, units: int = 1) -> None:
        self.done = min(self.total, self.done + units)
        if self.live:
            print(self.line(), file=self.stream, flush=True)
