"""What the ``omgpt`` subcommands share on the command line: each command is a typed function, and
jsonargparse -- the parser LightningCLI uses for ``omgpt fit`` -- builds its parser from the function's
signature and docstring (:func:`command`). Errors are one line and exit code 2.

The command line keeps its spelling: ``--batch-size`` is the parameter ``batch_size``, a ``bool``
parameter is a flag (``--no-progress``), a ``list`` parameter is a repeatable option
(``--option a=1 --option b=2``), a parameter named in ``positional`` is an optional positional, and
one given a flag of its own by :func:`flags` is that flag (``--list`` for ``list_experiments``).

A command-line module: the library never imports it.
"""

from __future__ import annotations

import argparse
import inspect
import re
import typing
from typing import Any, Callable, Optional, get_type_hints

from jsonargparse import ArgumentError, ArgumentParser
from jsonargparse.typing import register_type

from omgpt import checks
from omgpt.entry import OutputFolder, cap_jobs
from omgpt.errors import OMGPTError


# --------------------------------------------------------------------------------------------------
# Typed values: jsonargparse checks them with omgpt.checks while parsing, before the command runs.
def _checked_type(name: str, base: type, check: Callable[[Any], Any]) -> type:
    cls = type(name, (base,), {"__doc__": f"{base.__name__}, checked by omgpt.checks"})
    register_type(cls, serializer=base, deserializer=lambda value: cls(check(value)))
    return cls


PositiveInt = _checked_type("PositiveInt", int, lambda v: checks.number("value", v, integer=True, low=1))
PositiveFloat = _checked_type("PositiveFloat", float, lambda v: checks.number("value", v, low=0, low_open=True))
Number = _checked_type("Number", float, lambda v: checks.number("value", v))
Seed = _checked_type("Seed", int, lambda v: checks.seed("value", v))
Device = _checked_type("Device", str, lambda v: str(checks.device(v)))


# A checkpoint (a folder: its model.ckpt) that reads, weights only, and holds an OMGPT model's settings:
# a path to nothing, a text file or a truncated one is refused naming the option, before any work.
def _readable_checkpoint(value: str) -> str:
    import os

    from omgpt.checkpoints import read_checkpoint

    path = os.path.join(value, "model.ckpt") if os.path.isdir(value) else value
    if not {"task", "horizon"} <= set(read_checkpoint(path, mmap=True).get("hyper_parameters") or {}):
        raise OMGPTError(f"{path} is not an OMGPT checkpoint (no task and horizon in its hyper_parameters)")
    return value


CheckpointPath = _checked_type("CheckpointPath", str, _readable_checkpoint)


# A folder the command writes later (its --out): not empty, not a file, under a folder this process may
# write -- refused while parsing, not when the work is done and the folder is made.
def _writable_folder(value: str) -> str:
    try:
        OutputFolder()(value)
    except argparse.ArgumentTypeError as e:
        raise OMGPTError(str(e)) from None
    return value


OutputDir = _checked_type("OutputDir", str, _writable_folder)
# Processes at once: capped at the cores this process may use, with one line saying so (more would
# only take turns on the same cores: 40 workers on a 2-core machine).
Jobs = _checked_type("Jobs", int, lambda v: cap_jobs(checks.number("value", v, integer=True, low=1)))


# --------------------------------------------------------------------------------------------------
def flags(**spelling: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: parameters of a command function spelled otherwise on the command line,
    ``@flags(list_experiments="list")``: ``--list`` sets ``list_experiments`` (a parameter named ``list``
    would shadow the builtin inside the function). The docstring's ``Args:`` name the parameters."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.cli_flags = spelling
        return fn

    return mark


def _flags(fn: Callable[..., Any]) -> dict[str, str]:
    """Parameter -> its command-line flag, where :func:`flags` gave it another."""
    return getattr(fn, "cli_flags", {})


def _doc_line(fn: Callable[..., Any], name: str) -> str | None:
    """A parameter's help: its line under the docstring's ``Args:``."""
    found = re.search(rf"^\s*{name}: (.+)$", inspect.getdoc(fn) or "", re.M)
    return found.group(1) if found else None


def command(fn: Callable[..., Any], prog: str, positional: tuple[str, ...] = ()) -> Callable[[list[str]], int]:
    """``argv -> exit code``: parse ``argv`` against ``fn``'s signature and call it (``None`` -> 0)."""

    def run(argv: list[str]) -> int:
        kwargs = parse(fn, prog, argv, positional)
        result = fn(**kwargs)
        return 0 if result is None else int(result)

    run.__doc__ = fn.__doc__
    return run


def summary(fn: Callable[..., Any]) -> str:
    """The first line of ``fn``'s docstring (the command's one-line description)."""
    return (inspect.getdoc(fn) or "").split("\n\n")[0].replace("\n", " ").strip()


def parser(fn: Callable[..., Any], prog: str, positional: tuple[str, ...] = ()) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=summary(fn), exit_on_error=False)
    hints, parameters = get_type_hints(fn), inspect.signature(fn).parameters
    for name, flag in _flags(fn).items():  # first: --help lists them before the rest
        p.add_argument(
            f"--{flag}", dest=name, type=hints[name], default=parameters[name].default, help=_doc_line(fn, name)
        )
    p.add_function_arguments(fn, skip=set(positional) | set(_flags(fn)), as_group=False)
    for name in positional:
        p.add_argument(name, nargs="?", type=hints[name], default=parameters[name].default, help=_doc_line(fn, name))
    return p


def parse(fn: Callable[..., Any], prog: str, argv: list[str], positional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``fn``'s keyword arguments from ``argv``, or :class:`OMGPTError` (one line) on bad input."""
    p = parser(fn, prog, positional)
    try:
        namespace = p.parse_args(_jsonargparse_argv(fn, argv))
    except ArgumentError as e:
        message = one_line(str(e), option=True)
        required = "the following arguments are required: "
        if message.startswith(required):  # options, spelled as on the command line
            names = [n.strip() for n in message[len(required) :].split(",")]
            message = required + ", ".join(n if n in positional else "--" + n.replace("_", "-") for n in names)
        raise OMGPTError(f"{prog}: {message}") from None
    values = {name: namespace[name] for name in inspect.signature(fn).parameters}
    for name, value in values.items():  # an empty value never silently means the default, nor the folder "."
        if value == "" or (isinstance(value, list) and "" in value):
            raise OMGPTError(
                f"{prog}: --{_flags(fn).get(name, name).replace('_', '-')}: an empty value; give one or leave it out"
            )
    return values


def _jsonargparse_argv(fn: Callable[..., Any], argv: list[str]) -> list[str]:
    """The command line's spelling in jsonargparse's: ``--batch-size`` -> ``--batch_size``, a bare
    bool flag -> ``--flag true``, a repeated list option -> ``--option+ VALUE`` (append)."""
    hints = get_type_hints(fn)
    parameter = {flag: name for name, flag in _flags(fn).items()}
    out, i = [], 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--") or token == "--":
            out.append(token)
            continue
        name, eq, value = token[2:].partition("=")
        key = name.replace("-", "_")
        hint = hints.get(parameter.get(key.rstrip("+"), key.rstrip("+")))
        if hint is bool and not eq and (i == len(argv) or argv[i].lower() not in ("true", "false", "yes", "no")):
            out += [f"--{key}", "true"]
            continue
        if _is_list(hint) and not key.endswith("+"):
            key += "+"
        out.append(f"--{key}{eq}{value}")
    return out


def _is_list(hint: Any) -> bool:
    args = (
        [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) is typing.Union else [hint]
    )
    return len(args) == 1 and typing.get_origin(args[0]) is list


_NESTING = (
    "Parser key",
    "Problem with given class_path",
    "Does not validate against any",
    "Subtypes:",
    "Errors:",
    "Given value",
    "Expected a <class 'NoneType'>",
)


def one_line(message: str, option: bool = False) -> str:
    """jsonargparse nests a message per level ('Parser key "a.b":' / 'Problem with given class_path
    ...:' / the reason): the keys joined with dots (``--key`` for an ``option``), then the reason."""
    keys = re.findall(r'Parser key "([^"]+)"', message)
    reasons = [l.strip(" -") for l in message.splitlines() if l.strip(" -") and not l.strip(" -").startswith(_NESTING)]
    reason = re.sub(r"^Not of type \w+: ", "", (reasons or ["invalid value"])[0]).replace("value must be", "must be")
    if not keys:
        return reason
    where = ".".join(keys)
    where = "--" + where.replace("_", "-") if option else where
    return reason if reason.startswith(where) else f"{where}: {reason}"


def read_config(path: str, option: str) -> None:
    """Check, before any work, that a config file given on the command line is a YAML mapping (or
    empty): a binary or malformed file is one line naming it (:func:`omgpt.records.read_yaml`)."""
    from omgpt.records import RecordError, read_yaml

    value = read_yaml(path, what=f"{option} file")
    if value is not None and not isinstance(value, dict):
        raise RecordError(f"{path}: expected a mapping of settings in the {option} file, got {type(value).__name__}")


def task_options(pairs: Optional[list[str]]) -> dict:
    """``["pool_size=4", "censored=true"]`` -> ``{"pool_size": 4, "censored": True}`` (YAML scalars)."""
    import yaml

    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise OMGPTError(f"--option expects KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        if not value.strip():  # YAML would read it as null, and the task would silently take its default
            raise OMGPTError(f"--option {pair!r}: no value; give one or leave the option out")
        try:
            out[key.strip()] = yaml.safe_load(value)  # the values themselves are checked by make_task
        except yaml.YAMLError:
            raise OMGPTError(f"--option {pair!r}: the value is not valid YAML") from None
    return out
