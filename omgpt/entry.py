"""The contract of every entry point -- the ``omgpt`` command, each ``python -m tools.NAME`` and each
``python benchmarks/NAME.py``: an error the user can cause is one line ``omgpt: error: ...`` on stderr
and exit code 2, found before any work starts, so nothing is half-written; Ctrl-C is one line and exit
code 130; never a traceback for bad input.

* :func:`guarded` runs a command under that contract (``omgpt``'s :func:`~omgpt.commands.cli.cli_main`
  runs every command through it); :func:`entry_point` makes a script's ``main(argv)`` do the same.
* :class:`ScriptParser` is argparse with one-line errors that name the option, and checks across
  options (:meth:`ScriptParser.check`) that run as part of the parse: when ``parse_args`` returns,
  every argument has been checked, and the work may start.
* The argparse types below (:class:`Integer`, :class:`Real`, :class:`Seed`, :class:`Jobs`,
  :class:`Text`, :class:`Names`, :class:`Numbers`, :class:`InputFile`, :class:`InputFolder`,
  :class:`Checkpoint`, :class:`Named`, :class:`OutputFile`, :class:`OutputFolder`, :class:`Device`)
  say what an option accepts: each refuses the rest with one line, and ``tests/test_fuzz.py`` reads
  them off the parsers to know which hostile values an option must refuse.

It sits in the library's layer, beside :mod:`omgpt.errors`, so that the benchmark scripts (which the
commands' layer sits above) can use it too; nothing in the library imports it but the commands'
helpers.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

from omgpt.errors import OMGPTError

INTERRUPTED = 128 + signal.SIGINT  # the shell's exit code for a command ended by Ctrl-C: 130


# --------------------------------------------------------------------------------------------------
# The wrapper.
def guarded(run: Callable[[], Any]) -> int:
    """``run()``'s exit code (an int; anything else, such as a script's results, is 0), with a user's
    error as one line and exit code 2 and Ctrl-C as one line and exit code 130. What was being written
    is cleaned up by then (:mod:`omgpt.files`)."""
    try:
        code = run()
        return code if isinstance(code, int) else 0
    except KeyboardInterrupt:
        print("omgpt: interrupted", file=sys.stderr)
        return INTERRUPTED
    except SystemExit as e:  # sys.exit("message"): an error said in words is one line and exit 2 too
        if isinstance(e.code, str):
            return error(e.code)
        raise
    except Exception as e:
        message = user_error(e)
        if message is None:
            raise
        return error(message)


def user_error(e: BaseException) -> str | None:
    """The one line a user's error ends with, or ``None`` for a bug (which keeps its traceback)."""
    if isinstance(e, FloatingPointError):  # OMGPTModule stops before a non-finite update reaches the weights
        return f"{e}; training stopped (lower the learning rate?); checkpoints written before it are unchanged"
    lightning = sys.modules.get("lightning.fabric.utilities.exceptions")  # (raised only once Lightning is in)
    if lightning is not None and isinstance(e, lightning.MisconfigurationException):  # a bad trainer setting
        return str(e)
    if isinstance(e, OMGPTError):
        return str(e) or type(e).__name__
    if isinstance(e, OSError):  # a file or folder the command cannot read or write (permissions, disk full, ...)
        return f"{e.strerror or e}: {e.filename}" if e.filename else str(e)
    return None


def error(message: str) -> int:
    """Print ``omgpt: error: <the first line of message>`` on stderr; returns the exit code, 2."""
    lines = str(message).strip().splitlines()
    print(f"omgpt: error: {lines[0] if lines else message}", file=sys.stderr)
    return 2


def entry_point(main: Callable[..., Any]) -> Callable[[list[str] | None], int]:
    """Decorator: a script's ``main(argv)`` under :func:`guarded`'s contract, returning the exit code
    (a script ends with ``sys.exit(main())``); ``main.__wrapped__(argv)`` is the function
    itself, which returns what it measured (the tests call it so) and raises what it raises."""

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        return guarded(lambda: main(argv))

    return wrapped


# --------------------------------------------------------------------------------------------------
# The parser.
class ScriptParser(argparse.ArgumentParser):
    """argparse whose errors are :class:`OMGPTError` (one line naming the option: ``argument --runs:
    must be a positive integer, got '-5'``) instead of a usage message and ``SystemExit(2)``, with
    checks across options run as part of the parse (:meth:`check`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._checks: list[Callable[[argparse.Namespace], None]] = []

    def check(self, fn: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], None]:
        """Register ``fn(args)``, which raises :class:`OMGPTError` for a combination of values it refuses."""
        self._checks.append(fn)
        return fn

    def parse_known_args(self, args=None, namespace=None):
        parsed, extra = super().parse_known_args(args, namespace)
        if not extra:  # (unknown arguments are the error parse_args reports)
            for check in self._checks:
                check(parsed)
        return parsed, extra

    def error(self, message: str):
        raise OMGPTError(f"{self.prog}: {message}")


def script_command(file: str | Path) -> str:
    """How the script at ``file`` is run from the repository root: ``python benchmarks/NAME.py``,
    ``python -m tools.NAME`` or ``python -m omgpt.analysis.NAME``."""
    path = Path(file).resolve()
    return {
        "tools": f"python -m tools.{path.stem}",
        "analysis": f"python -m omgpt.analysis.{path.stem}",
    }.get(path.parent.name, f"python benchmarks/{path.name}")


def script_parser(file: str, doc: str | None, **kwargs: Any) -> ScriptParser:
    """The parser of the script at ``file`` (``__file__``): its prog is :func:`script_command`, its
    description the first paragraph of its docstring."""
    return ScriptParser(prog=script_command(file), description=(doc or "").split("\n\n")[0], **kwargs)


# --------------------------------------------------------------------------------------------------
# The types: each converts a command-line string or refuses it in one line (ArgumentTypeError, which
# argparse prefixes with the option).
class Value:
    """An argparse ``type``: ``__call__(text)`` converts or raises ``ArgumentTypeError``."""

    kind = "value"

    @property
    def __name__(self) -> str:  # argparse names a type in some messages
        return type(self).__name__.lower()

    def refuse(self, text: str, wanted: str) -> None:
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")

    def __repr__(self) -> str:
        fields = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


class Real(Value):
    """A finite number in ``[low, high]`` (``low_open``: ``> low``)."""

    kind = "number"

    def __init__(
        self, low: float | None = None, high: float | None = None, low_open: bool = False, high_open: bool = False
    ):
        self.low, self.high, self.low_open, self.high_open, self.integer = low, high, low_open, high_open, False

    def __call__(self, text: str):
        from omgpt import checks

        try:
            return checks.number("value", text, integer=self.integer, **self.bounds())
        except OMGPTError:
            self.refuse(text, self.wanted())

    def bounds(self) -> dict:
        return {"low": self.low, "high": self.high, "low_open": self.low_open, "high_open": self.high_open}

    def wanted(self) -> str:
        from omgpt import checks

        return checks._wanted(self.integer, **self.bounds())

    def accepts(self, x: float) -> bool:
        return (
            math.isfinite(x)
            and (not self.integer or float(x).is_integer())
            and (self.low is None or (x > self.low if self.low_open else x >= self.low))
            and (self.high is None or (x < self.high if self.high_open else x <= self.high))
        )


class Integer(Real):
    """An integer in ``[low, high]``."""

    kind = "integer"

    def __init__(self, low: int | None = 1, high: int | None = None):
        super().__init__(low, high)
        self.integer = True


class Seed(Integer):
    """A seed: any (``None``), a test seed (``"test"``: reported numbers; a burned one is refused) or a
    validation seed (``"validation"``: choices), :mod:`omgpt.seeding`."""

    def __init__(self, of: str | None = None):
        from omgpt import checks, seeding

        allowed = {None: range(0, checks.SEED_MAX + 1), "test": seeding.TEST_SEEDS}.get(of, seeding.VALIDATION_SEEDS)
        super().__init__(allowed.start, allowed.stop - 1)
        self.of = of

    def __call__(self, text: str) -> int:
        from omgpt import seeding

        value = super().__call__(text)
        try:
            if self.of == "test":
                seeding.check_test_seed(value, "the seed")
            elif self.of == "validation":
                seeding.check_validation_seed(value, "the seed")
        except OMGPTError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask: a container's or ``taskset``'s share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on macOS or Windows)
        return os.cpu_count() or 1


def cap_jobs(jobs: int, option: str = "--jobs") -> int:
    """``jobs`` processes, at most :func:`usable_cores`: more would only take turns on the same cores
    (with one line saying so)."""
    cores = usable_cores()
    if jobs > cores:
        print(f"omgpt: {option} {jobs} capped at {cores}, the CPU cores this process may use", file=sys.stderr)
        return cores
    return jobs


class Jobs(Integer):
    """Processes at once: a positive integer, capped at the cores this process may use (:func:`cap_jobs`)."""

    kind = "jobs"

    def __init__(self):
        super().__init__(1, None)

    def __call__(self, text: str) -> int:
        return cap_jobs(super().__call__(text))


class Text(Value):
    """Any non-empty string (an empty one would silently mean the default, or nothing)."""

    kind = "text"

    def __call__(self, text: str) -> str:
        if not text.strip():
            self.refuse(text, "a non-empty value")
        return text


class Name(Value):
    """One of ``choices`` (a list, or a callable that returns one: a registry read on use)."""

    kind = "name"

    def __init__(self, choices: Iterable[str] | Callable[[], Iterable[str]]):
        self._choices = choices

    @property
    def choices(self) -> list[str]:
        return list(self._choices() if callable(self._choices) else self._choices)

    def __call__(self, text: str) -> str:
        if text not in self.choices:
            self.refuse(text, f"one of {', '.join(self.choices)}")
        return text


class Names(Name):
    """Comma-separated names, each one of ``choices``; kept as the text given (the script splits it)."""

    kind = "names"

    def __call__(self, text: str) -> str:
        if not text.strip() or any(n not in self.choices for n in text.split(",")):
            self.refuse(text, f"comma-separated names of {', '.join(self.choices)}")
        return text


class Numbers(Value):
    """Comma-separated numbers, each accepted by ``each`` (an :class:`Integer` or a :class:`Real`); kept
    as the text given (the script splits it)."""

    kind = "numbers"

    def __init__(self, each: Real):
        self.each = each

    def __call__(self, text: str) -> str:
        if not text.strip() or not all(self.each.accepts(_float(p)) for p in text.split(",")):
            self.refuse(text, f"comma-separated numbers, each {self.each.wanted()}")
        return text


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


class PathValue(Value):
    """A path, relative to the working directory or to ``under`` (a script that resolves its paths
    against the repository root: ``ROOT / args.runs_dir``)."""

    def __init__(self, under: Path | None = None):
        self.under = under

    def path(self, text: str) -> Path:
        return Path(self.under or "") / text


class InputFile(PathValue):
    """An existing, readable file."""

    kind = "input-file"

    def __call__(self, text: str) -> Path:
        path = self.path(text)
        if not text.strip() or not path.is_file() or not os.access(path, os.R_OK):
            self.refuse(text, "a readable file" + (" (that is a folder)" if path.is_dir() and text.strip() else ""))
        return path


class InputFolder(PathValue):
    """An existing folder."""

    kind = "input-folder"

    def __call__(self, text: str) -> Path:
        if not text.strip() or not self.path(text).is_dir():
            self.refuse(text, "an existing folder")
        return self.path(text)


class Checkpoint(InputFile):
    """A checkpoint written by ``omgpt fit`` (or a folder holding its ``model.ckpt``), read safely
    (weights only) and checked: a text file, a truncated or malicious one is refused here."""

    kind = "checkpoint"

    def __call__(self, text: str) -> Path:
        from omgpt.model import load_model

        path = self.path(text)
        if text.strip() and path.is_dir() and (path / "model.ckpt").is_file():
            path = path / "model.ckpt"
        super().__call__(str(path))
        try:
            load_model(path)
        except OMGPTError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return path


class Named(Value):
    """``NAME=VALUE`` with a non-empty name and a value ``each`` accepts -> ``(name, value)``."""

    kind = "named"

    def __init__(self, each: Value):
        self.each = each

    def __call__(self, text: str) -> tuple[str, Any]:
        name, eq, value = text.partition("=")
        if not name.strip() or not eq:
            self.refuse(text, f"NAME={self.each.kind.upper().replace('-', '_')}")
        return name, self.each(value)


class OutputFile(PathValue):
    """A file this command may write later: not a folder, in a folder that exists or can be created
    and takes a new file (tried with a temporary file, removed at once: nothing is left behind)."""

    kind = "output-file"

    def __call__(self, text: str) -> Path:
        path = self.path(text)
        if not text.strip():
            self.refuse(text, "a file to write")
        if path.is_dir():
            self.refuse(text, "a file to write, not a folder")
        if path.exists() and not os.access(path, os.W_OK):
            self.refuse(text, "a file this process may write")
        _writable_folder(path.parent, text, self)
        return path


class OutputFolder(PathValue):
    """A folder this command may create or write into later (not a file; its nearest existing
    ancestor takes a new file)."""

    kind = "output-folder"

    def __call__(self, text: str) -> Path:
        path = self.path(text)
        if not text.strip():
            self.refuse(text, "a folder to write")
        if path.exists() and not path.is_dir():
            self.refuse(text, "a folder to write, not a file")
        _writable_folder(path, text, self)
        return path


def _writable_folder(folder: Path, text: str, value: Value) -> None:
    """The nearest existing ancestor of ``folder`` must be a folder that takes a new file."""
    folder = folder.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        value.refuse(text, f"a path under a folder ({folder} is a file)")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".omgpt-check-", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        value.refuse(text, f"a path this process may write ({folder}: {e.strerror or e})")


class Device(Value):
    """A torch device that exists here (:func:`omgpt.checks.device`)."""

    kind = "device"

    def __call__(self, text: str) -> str:
        from omgpt import checks

        try:
            return str(checks.device(text, "the device"))
        except OMGPTError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
