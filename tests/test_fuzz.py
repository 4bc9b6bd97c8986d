"""Every option of every entry point, given hostile values: the ``omgpt`` commands and every
``tools``/``benchmarks`` script with an argument parser refuse bad input as docs/cli.md says -- one line
``omgpt: error: ...`` naming the option, exit code 2, no traceback, nothing written -- before any work.

The options are read off the parsers themselves (argparse's actions for the scripts, captured by running
each script's ``main`` up to its ``parse_args``; jsonargparse's for the ``omgpt`` commands; LightningCLI's
for ``omgpt fit``), so an option added tomorrow is fuzzed tomorrow. Each option gets every value of
:data:`HOSTILE`: negative, zero, huge (10^12, also as ``1e12``), NaN, inf, empty, a word or a fraction where
a number belongs, a path to nothing, a folder, a path under ``/proc``, a text file where a file of
another kind (a checkpoint) belongs.

**The rule: what must be refused, what may be accepted.** An option's declared type says what it accepts
(:mod:`omgpt.entry`'s types for the scripts, :mod:`omgpt.commands.args`'s for the commands, the Python
type of a LightningCLI setting). A hostile value outside it MUST be refused: exit code 2, one line on
stderr starting ``omgpt: error:`` that names the option, no traceback, no file written or changed. A
value inside it MAY be accepted: then only "no traceback, nothing written outside the run's designated
output" is asserted, and a refusal is still one line (a later check -- memory, a burned seed, a
combination of options -- may refuse it). What "inside" means per kind:

* a number (``Integer``/``Real``/``Seed``, ``PositiveInt``...): its declared bounds; a bare ``int`` or
  ``float`` (an option without a declared type) is taken as a count, ``0 <= x < 10^12``, finite; an
  option without a declared type is known by its name where it has one of :data:`BY_NAME` (``--json``
  is a file to write, ``--ckpt`` a checkpoint);
* ``--jobs``: a positive integer; a value above the cores this process may use is accepted only capped
  to them, with a line saying so (the work is handed the capped count);
* a name or names: the declared choices; free text: anything but the empty string (an empty value never
  silently means the default);
* a file to read: an existing readable file (a checkpoint: one that loads; a text file is refused);
  a folder to read: an existing folder; a file to write: not empty, not a folder, not under ``/proc``;
  a folder to write: not empty, not a file, not under ``/proc``;
* a flag: takes no value (``--flag=abc`` is refused).

**Fast, because no work runs.** Every case runs in this process: a script's ``main(argv)`` up to the
moment its ``parse_args`` returns -- every check of the script's arguments is part of its parse
(:class:`omgpt.entry.ScriptParser`) -- and a command up to the function where its work starts (the
rollout, the tuning, the trainer's ``fit``), which is replaced by a stub that ends the case. A refusal
found only after that point is found too late, and fails here as an accepted bad value.

A seeded sample runs with the suite (about 30 s); the whole sweep is ``pytest -m fuzz tests/test_fuzz.py``
(deselected otherwise: tests/conftest.py).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import io
import math
import os
import random
import subprocess
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from omgpt import entry

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = {
    "negative": "-5",
    "zero": "0",
    "huge": "1000000000000",
    "1e12": "1e12",
    "nan": "nan",
    "inf": "inf",
    "empty": "",
    "word": "abc",
    "fraction": "2.5",
    "thousand": "1000",  # more processes than any machine here has cores
    "nothing": "{tmp}/nothing/here",
    "folder": "{tmp}/folder",
    "proc": "/proc/omgpt/fuzz",
    "text file": "{tmp}/notes.txt",
}
SAMPLE = 140  # cases of the default suite (seeded): about 30 s here
SHIPPED = ("pretrained", "configs/tuned")  # what no case may change in the repository
TRACE = "Traceback"


class Accepted(BaseException):
    """A case reached the work: the value was accepted (``seen``: what the work was handed)."""

    def __init__(self, seen: Any = None):
        self.seen = seen


class Captured(BaseException):
    def __init__(self, parser):
        self.parser = parser


# --------------------------------------------------------------------------------------------------
# What an option accepts, from its declared type.
@dataclass
class Option:
    where: str  # "python benchmarks/x.py", "omgpt evaluate", ...
    flag: str  # "--runs", or a positional's name
    kind: str  # number, jobs, text, names, input-file, checkpoint, input-folder, output-file, output-folder, flag, device, any
    positional: bool = False
    domain: Any = None  # a number's (low, high, integer, low_open, high_open); names: the choices
    named: bool = False  # NAME=VALUE
    names: set[str] = field(default_factory=set)  # how a message may name it


def number_domain(t) -> tuple:
    return (t.low, t.high, t.integer, t.low_open, t.high_open)


BY_NAME = {
    "json": "output-file",
    "out": "output-folder",
    "ckpt": "checkpoint",
    "ckpts": "checkpoint",
    "checkpoint": "checkpoint",
}
COUNT = (0, 10**12, True, False, True)  # a bare int: a count or a seed
FINITE = (0, 10**12, False, False, True)  # a bare float


def inside(option: Option, key: str, value: str) -> bool:
    """Whether ``value`` (hostile value ``key``) is inside what the option accepts (see the docstring)."""
    kind = option.kind
    if kind in ("number", "jobs"):
        low, high, integer, low_open, high_open = option.domain
        try:
            x = float(value)
        except ValueError:
            return False
        return (
            math.isfinite(x)
            and (not integer or x.is_integer())
            and (low is None or (x > low if low_open else x >= low))
            and (high is None or (x < high if high_open else x <= high))
        )
    if kind == "numbers":
        return bool(value) and all(
            inside(Option("", "", "number", domain=option.domain), key, v) for v in value.split(",")
        )
    if kind == "names":
        return bool(value) and all(v in option.domain for v in value.split(","))
    if kind == "name":
        return value in option.domain
    if kind == "device":
        return False
    if kind == "flag":
        return False
    if kind in ("input-file", "checkpoint", "input-folder"):
        exists = {"input-file": os.path.isfile, "checkpoint": lambda p: False, "input-folder": os.path.isdir}[kind]
        return bool(value) and exists(value)
    if kind == "output-file":
        return bool(value) and key not in ("folder", "proc")
    if kind == "output-folder":
        return bool(value) and key not in ("text file", "proc")
    return value != ""  # free text


def script_option(where: str, action: argparse.Action) -> Option:
    t = action.type
    names = {s.lstrip("-") for s in action.option_strings} | {action.dest, action.dest.replace("_", "-")}
    if action.metavar:
        names.add(str(action.metavar))
    flag = action.option_strings[-1] if action.option_strings else action.dest
    o = Option(where, flag, "any", positional=not action.option_strings, names=names)
    if action.nargs == 0:
        o.kind = "flag"
    elif isinstance(t, entry.Named):
        o.named, t = True, t.each
    if o.kind == "flag":
        return o
    if isinstance(t, entry.Jobs) or action.dest == "jobs":
        o.kind, o.domain = "jobs", (1, None, True, False, False)
    elif isinstance(t, entry.Real):
        o.kind, o.domain = "number", number_domain(t)
    elif isinstance(t, entry.Numbers):
        o.kind, o.domain = "numbers", number_domain(t.each)
    elif isinstance(t, entry.Name):
        o.kind, o.domain = t.kind, t.choices
    elif isinstance(t, entry.Value):
        o.kind = t.kind
    elif action.choices:
        o.kind, o.domain = "name", list(action.choices)
    elif action.dest in BY_NAME:  # an option without a declared type, known by its name
        o.kind = BY_NAME[action.dest]
        o.named = o.named or action.dest == "checkpoint"
    elif t is int:
        o.kind, o.domain = "number", COUNT
    elif t is float:
        o.kind, o.domain = "number", FINITE
    else:
        o.kind = "text"
    return o


# --------------------------------------------------------------------------------------------------
# The scripts: every tools/ and benchmarks/ file with a main and an argument parser.
def script_paths() -> list[Path]:
    found = []
    for path in sorted(
        [*(ROOT / "tools").glob("*.py"), *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "analysis").glob("*.py")]
    ):
        text = path.read_text()
        if "def main" in text and "argparse" in text or "script_parser" in text:
            found.append(path)
    return found


_MODULES: dict[Path, Any] = {}


def load(path: Path):
    if path not in _MODULES:
        if path.parent.name == "tools":
            _MODULES[path] = importlib.import_module(f"tools.{path.stem}")
        else:
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))  # (the scripts import their siblings)
            spec = importlib.util.spec_from_file_location(f"fuzzed_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _MODULES[path] = module
    return _MODULES[path]


def call_main(path: Path, argv: list[str]):
    """Run the script's main on ``argv`` as its command line would."""
    main = load(path).main
    with _patched(sys, "argv", [str(path), *argv]):
        if inspect.signature(main).parameters:
            return main(argv)
        return main()


@contextlib.contextmanager
def _patched(obj, name: str, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def parser_of(path: Path) -> argparse.ArgumentParser:
    """The parser a script's main builds (captured at its parse_args, before any work)."""

    def capture(self, args=None, namespace=None):
        raise Captured(self)

    with _patched(argparse.ArgumentParser, "parse_args", capture), contextlib.redirect_stdout(io.StringIO()):
        try:
            call_main(path, [])
        except Captured as c:
            return c.parser
    raise AssertionError(f"{entry.script_command(path)}: its main parsed no arguments with argparse")


def valid_value(o: Option, tmp: Path, ckpt: str) -> str:
    """A value the option accepts, for the arguments a case needs but does not fuzz."""
    value = {
        "number": lambda: str(max(o.domain[0] or 0, 1) if o.domain[2] else (o.domain[0] or 0) + 0.5),
        "jobs": lambda: "1",
        "name": lambda: o.domain[0],
        "names": lambda: o.domain[0],
        "checkpoint": lambda: ckpt,
        "input-file": lambda: str(tmp / "notes.txt"),
        "input-folder": lambda: str(tmp / "folder"),
        "output-file": lambda: str(tmp / "out" / "x.json"),
        "output-folder": lambda: str(tmp / "out"),
    }.get(o.kind, lambda: "x")()
    return f"x={value}" if o.named else value


@dataclass
class Case:
    target: str  # a script's path, or "omgpt COMMAND"
    prefix: list[str]  # subcommands, or the command's base command line
    option: Option
    key: str  # of HOSTILE
    others: list = field(default_factory=list)  # a script's other required arguments: (Option, valid value)
    position: int = 0  # a fuzzed positional's place among the positionals

    @property
    def id(self) -> str:
        return f"{self.option.where} {' '.join(self.prefix[:1])} {self.option.flag}={self.key}"


def script_cases(tmp: Path, ckpt: str) -> list[Case]:
    cases = []
    for path in script_paths():
        for prefix, parser in _subparsers(parser_of(path), []):
            actions = [
                a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            ]
            options = {a: script_option(entry.script_command(path), a) for a in actions}
            positionals = [a for a in actions if not a.option_strings]
            for action, o in options.items():
                others = [
                    (other, valid_value(other, tmp, ckpt))
                    for a, other in options.items()
                    if a is not action and (other.positional or a.required)
                ]
                at = positionals.index(action) if action in positionals else 0
                cases += [Case(str(path), prefix, o, key, others, at) for key in HOSTILE]
    return cases


def _subparsers(parser, prefix):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(prefix, parser)]
    return [pair for name, p in subs[0].choices.items() for pair in _subparsers(p, prefix + [name])]


def script_argv(case: Case, value: str) -> list[str]:
    """The subcommands, the positionals in their order (the fuzzed one's value in its place), the
    required options, then the fuzzed option as ``--flag=VALUE`` (a flag: ``--flag=abc``)."""
    o = case.option
    value = f"x={value}" if o.named else value
    positionals = [v for other, v in case.others if other.positional]
    if o.positional:
        positionals.insert(case.position, value)
    argv = [*case.prefix, *positionals]
    argv += [x for other, v in case.others if not other.positional for x in (other.flag, v)]
    if not o.positional:
        argv.append(f"{o.flag}=abc" if o.kind == "flag" else f"{o.flag}={value}")
    return argv


# --------------------------------------------------------------------------------------------------
# Running a case and judging it.
def snapshot(folder: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def run_case(call: Callable[[], Any], cwd: Path) -> tuple[int | None, str, Any]:
    """``(exit code or None when accepted, stderr, what the work was handed)``."""
    err, out = io.StringIO(), io.StringIO()
    code, seen = None, None
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = call()
            except Accepted as a:
                seen = a.seen if a.seen is not None else True
            except SystemExit as e:  # (a script outside the wrapper)
                code = e.code if isinstance(e.code, int) else 1
                print(e.code, file=sys.stderr) if isinstance(e.code, str) else None
            except Exception:  # a traceback
                import traceback

                traceback.print_exc(file=err)
                code = 1
    finally:
        os.chdir(old)
    return code, err.getvalue(), seen


NOISE = ("Seed set to", "GPU available", "TPU available", "💡 Tip", "omgpt: 1 torch thread", "omgpt: 2 torch threads")


def judge(
    option: Option, key: str, value: str, argv: list[str], code, err: str, seen, before: dict, after: dict
) -> str | None:
    """What is wrong with a case's outcome (None: nothing)."""
    shown = f"{option.where} {' '.join(argv)}"
    lines = [l for l in err.strip().splitlines() if l.strip() and not l.startswith(NOISE)]
    cap = [l for l in lines if "capped at" in l]
    lines = [l for l in lines if "capped at" not in l]
    if TRACE in err:
        return f"{shown}: a traceback:\n{err[-1500:]}"
    if before != after:
        changed = sorted(set(before.items()) ^ set(after.items()))
        return f"{shown}: wrote or changed files: {changed[:4]}"
    must_refuse = not inside(option, key, value)
    if seen is not None and code is None:  # accepted: it reached the work
        if must_refuse:
            return (
                f"{shown}: accepted a value outside what {option.flag} accepts ({option.kind}), instead of refusing it"
            )
        if option.kind == "jobs" and int(float(value)) > entry.usable_cores():
            if not cap or (isinstance(seen, int) and seen > entry.usable_cores()):
                return f"{shown}: --jobs above the {entry.usable_cores()} usable cores is neither capped nor said so (work got {seen})"
        return None
    if code == 0 and not must_refuse:
        return None
    if code != 2 or len(lines) != 1 or not lines[0].startswith("omgpt: error:"):
        return f"{shown}: exit code {code}, stderr {lines!r}; expected one line 'omgpt: error: ...' and exit code 2"
    if must_refuse:
        said = lines[0].replace("_", "-")
        if not any(n.replace("_", "-") in said for n in option.names | {option.flag}):
            return f"{shown}: the refusal does not name {option.flag}: {lines[0]}"
    return None


def laid_out(tmp: Path) -> Path:
    """The working folder of every case: a folder and a text file to point options at."""
    (tmp / "folder").mkdir(exist_ok=True)
    (tmp / "notes.txt").write_text("a text file, not a checkpoint\n")
    return tmp


@pytest.fixture(scope="module")
def arena(tmp_path_factory) -> Path:
    return laid_out(tmp_path_factory.mktemp("fuzz"))


CKPT = str(ROOT / "pretrained" / "newsvendor" / "model.ckpt")


def shipped() -> dict:
    return {k: v for d in SHIPPED for k, v in snapshot(ROOT / d).items()}


def check_script_case(case: Case, tmp: Path) -> str | None:
    path = Path(case.target)
    value = HOSTILE[case.key].format(tmp=tmp)
    argv = script_argv(case, value)

    def boundary(self, args=None, namespace=None):
        parsed = BOUNDARY_PARSE(self, args, namespace)
        raise Accepted(getattr(parsed, "jobs", True))

    before = snapshot(tmp)
    with _patched(argparse.ArgumentParser, "parse_args", boundary):
        code, err, seen = run_case(lambda: call_main(path, argv), tmp)
    return judge(case.option, case.key, value, argv, code, err, seen, before, snapshot(tmp))


BOUNDARY_PARSE = argparse.ArgumentParser.parse_args


# --------------------------------------------------------------------------------------------------
# The omgpt commands: jsonargparse's parsers of the command functions, and LightningCLI's for fit.
def command_option(command: str, action) -> Option | None:
    from omgpt.commands import args as cargs

    hint = getattr(action, "_typehint", None)
    if hint is None:
        return None
    inner = (
        [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) is typing.Union else [hint]
    )
    t = inner[0] if len(inner) == 1 else hint
    name = action.dest
    o = Option(f"omgpt {command}", "--" + name.replace("_", "-"), "text", names={name, name.replace("_", "-")})
    bounds = {
        cargs.PositiveInt: (1, None, True, False, False),
        cargs.Seed: (0, 2**32 - 1, True, False, False),
        cargs.PositiveFloat: (0, None, False, True, False),
        cargs.Number: (None, None, False, False, False),
        int: COUNT,
        float: FINITE,
    }
    if t is bool:
        o.kind = "flag"
    elif name == "jobs":
        o.kind, o.domain = "jobs", (1, None, True, False, False)
    elif t in bounds:
        o.kind, o.domain = "number", bounds[t]
    elif t is cargs.Device:
        o.kind = "device"
    elif typing.get_origin(t) is typing.Literal:
        o.kind, o.domain = "name", [str(a) for a in typing.get_args(t)]
    elif name == "ckpt":
        o.kind = "checkpoint"
    elif name in ("out", "models_dir"):
        o.kind = "output-folder"
    elif name == "json":
        o.kind = "output-file"
    elif name == "fit_config":
        o.kind = "input-file"
    return o


PRICING_OBS = None


def pricing_with_obs_head() -> str | None:
    """A pricing checkpoint with the observation head (demand-prediction's base), if the store has one."""
    from omgpt.model import checkpoint_hparams
    from omgpt.checkpoints import read_checkpoint

    for path in sorted((ROOT / "results" / "models").glob("pricing-*/model.ckpt")):
        if checkpoint_hparams(read_checkpoint(path, mmap=True), path)["network"].get("obs_head"):
            return str(path)
    return None


def command_bases(tmp: Path) -> dict[str, tuple[list[str], list[tuple[str, str]]]]:
    """Each command: a cheap valid command line, and where its work starts (module, function) -- the stub."""
    out = str(tmp / "out")
    bases = {
        "evaluate": (
            [
                "--task",
                "newsvendor",
                "--policies",
                "oracle,alg-star",
                "--runs",
                "2",
                "--horizon",
                "3",
                "--seed",
                "7",
                "--out",
                out,
                "--no-progress",
            ],
            [("omgpt.commands.evaluate", "evaluate_policies")],
        ),
        "tune": (
            ["--task", "newsvendor", "--policies", "erm", "--horizon", "3", "--runs", "2"],
            [("omgpt.commands.tune", "run_tuning")],
        ),
        "demo": (["--out", out], [("omgpt.commands.demo", "run_demo")]),
        "experiment": (
            ["main-results", "--out", out],
            [("omgpt.commands.experiment", f) for f in ("run_experiment", "run_all", "redraw_experiment")],
        ),
        "bench": (["--smoke"], [("omgpt.commands.bench", "run")]),
        "probe": (["--ckpt", CKPT, "--out", out], [("omgpt.commands.interpret", "output_folder")]),
        "tsne": (["--ckpt", CKPT, "--out", out], [("omgpt.commands.interpret", "output_folder")]),
        "tsne-training": (
            ["--ckpt", CKPT, "--ckpt", CKPT, "--out", out],
            [("omgpt.commands.interpret", "output_folder")],
        ),
    }
    obs = pricing_with_obs_head()
    if obs:
        bases["demand-prediction"] = (
            ["--ckpt", obs, "--runs", "2", "--seed", "7", "--out", out, "--no-progress"],
            [("omgpt.commands.evaluate", "evaluate_policies")],
        )
    return bases  # fmt: skip


def command_cases(tmp: Path) -> list[Case]:
    from omgpt.commands import cli
    from omgpt.commands.args import parser

    cases = []
    for command, (base, _) in command_bases(tmp).items():
        get, positional = cli.FUNCTIONS[command]
        p = parser(get(), f"omgpt {command}", positional)
        for action in p._actions:
            o = command_option(command, action)
            if o is None or (action.dest in positional):
                continue
            cases += [Case(f"omgpt {command}", base, o, key) for key in HOSTILE]
    return cases


def _stub(seen_key: str | None = None):
    def stub(*args, **kwargs):
        raise Accepted(kwargs.get("jobs", args[8] if len(args) > 8 else True) if seen_key == "jobs" else True)

    return stub


def check_command_case(case: Case, tmp: Path) -> str | None:
    from omgpt.commands.cli import cli_main

    command = case.target.split()[1]
    o = case.option
    value = HOSTILE[case.key].format(tmp=tmp)
    argv = [command, *case.prefix, f"{o.flag}=abc" if o.kind == "flag" else f"{o.flag}={value}"]
    before = snapshot(tmp)
    with pytest.MonkeyPatch.context() as m:
        for module, name in command_bases(tmp)[command][1]:
            m.setattr(importlib.import_module(module), name, _stub("jobs" if name == "evaluate_policies" else None))
        code, err, seen = run_case(lambda: cli_main(argv), tmp)
    return judge(o, case.key, value, argv, code, err, seen, before, snapshot(tmp))


FIT_KNOWN = {  # LightningCLI settings whose domain the fuzzer knows (the rest: by their Python type)
    "model.finetune.init_from": "checkpoint",
    "ckpt_path": "checkpoint",
}


def fit_cases() -> list[Case]:
    """``omgpt fit``'s settings: the model's, the data's, the trainer's scalars, seed and checkpoint."""
    from omgpt.commands.lightning_cli import OMGPTCLI, build_cli

    def capture(self, parser, args):
        raise Captured(parser)

    with _patched(OMGPTCLI, "parse_arguments", capture), contextlib.redirect_stderr(io.StringIO()):
        try:
            build_cli(["fit"])
        except Captured as c:
            top = c.parser
    fit = top._subcommands_action._name_parser_map["fit"]
    cases = []
    for action in fit._actions:
        dest = action.dest
        if not dest.startswith(("model.", "data.", "trainer.", "seed_everything", "ckpt_path")) or dest.count(".") > 2:
            continue
        hint = getattr(action, "_typehint", None)
        inner = (
            [a for a in typing.get_args(hint) if a is not type(None)]
            if typing.get_origin(hint) is typing.Union
            else [hint]
        )
        t = inner[0] if len(inner) == 1 else None
        o = Option("omgpt fit", "--" + dest, "any", names={dest})
        if dest in FIT_KNOWN:
            o.kind = FIT_KNOWN[dest]
        elif dest in ("seed_everything", "data.seed"):
            o.kind, o.domain = "number", (0, 2**32 - 1, True, False, False)
        elif t is float:
            o.kind, o.domain = "number", (None, None, False, False, False)  # finite
        elif t is int:
            o.kind, o.domain = "number", (None, None, True, False, False)  # an integer (-1 may mean "no limit")
        else:
            continue  # strings, unions, classes: Lightning's own (docs/cli.md); their errors are still checked below
        cases += [Case("omgpt fit", [], o, key) for key in HOSTILE]
    return cases


def check_fit_case(case: Case, tmp: Path) -> str | None:
    import lightning.pytorch as pl

    from omgpt.commands.cli import cli_main

    o = case.option
    value = HOSTILE[case.key].format(tmp=tmp)
    runs = tmp / "runs"
    argv = ["fit", "--config", str(ROOT / "configs/newsvendor.yaml"), "--config", str(ROOT / "configs/scale/tiny.yaml"),
            "--trainer.logger.init_args.save_dir", str(runs), "--trainer.enable_progress_bar", "false",
            f"{o.flag}={value}"]  # fmt: skip
    before = {k: v for k, v in snapshot(tmp).items() if not k.startswith(str(runs))}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(pl.Trainer, "fit", _stub())
        code, err, seen = run_case(lambda: cli_main(argv), tmp)
    after = {
        k: v for k, v in snapshot(tmp).items() if not k.startswith(str(runs))
    }  # the run's own folder may hold its lock
    return judge(o, case.key, value, argv, code, err, seen, before, after)


# --------------------------------------------------------------------------------------------------
def all_cases(tmp: Path) -> list[tuple[str, Case]]:
    cases = [("script", c) for c in script_cases(tmp, CKPT)]
    cases += [("command", c) for c in command_cases(tmp)]
    cases += [("fit", c) for c in fit_cases()]
    return cases


def check(kind: str, case: Case, tmp: Path) -> str | None:
    return {"script": check_script_case, "command": check_command_case, "fit": check_fit_case}[kind](case, tmp)


def sweep(cases, tmp: Path) -> list[str]:
    before = shipped()
    problems = [p for kind, c in cases if (p := check(kind, c, tmp))]
    if shipped() != before:
        problems.append(f"a shipped file ({', '.join(SHIPPED)}) changed")
    return problems


def sample(cases: list, n: int) -> list:
    """A seeded sample that keeps every script and command in it, and every must-refuse kind of value."""
    rng = random.Random(20_261_201)
    by_target: dict[str, list] = {}
    for kc in cases:
        by_target.setdefault(kc[1].target, []).append(kc)
    picked = [rng.choice(group) for group in by_target.values()]
    rest = [kc for kc in cases if kc not in picked]
    return picked + rng.sample(rest, max(0, n - len(picked)))


def test_every_script_with_a_main_has_a_parser_the_fuzzer_reads():
    paths = script_paths()
    assert {p.stem for p in paths} >= {
        "time_to_quality",
        "reference_models",
        "evaluate_jobs",
        "recipe",
        "training_curves",
    }, paths
    for path in paths:
        parser_of(path)


def test_every_script_run_as_a_file_exits_with_its_mains_code():
    """The fuzzer calls ``main`` in-process; the shell sees the code only if the file passes it on (a
    bare ``main()`` refused bad input in one line and still exited 0)."""
    for path in script_paths():
        tail = path.read_text().split('if __name__ == "__main__":', 1)[-1]
        assert "sys.exit(main())" in tail, path


def test_every_script_option_declares_what_it_accepts():
    """A new option of a script takes one of omgpt.entry's types (or is a flag, or has choices): a bare
    ``type=int`` would accept -5 and 10^12, a bare string an empty value."""
    bare = []
    for path in script_paths():
        for prefix, parser in _subparsers(parser_of(path), []):
            for a in parser._actions:
                typed = isinstance(a.type, entry.Value) or a.nargs == 0 or a.choices
                if not typed and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                    bare.append(f"{entry.script_command(path)} {' '.join(prefix)} {a.option_strings or a.dest}")
    assert not bare, bare


def test_a_seeded_sample_of_hostile_values_is_refused_in_one_line_before_any_work(arena):
    problems = sweep(sample(cached_cases(arena), SAMPLE), arena)
    assert not problems, "\n".join(problems)


PROBED = [  # the rows of the probe that found the scripts and the new options soft: always in the suite
    ("python benchmarks/time_to_quality.py", "--holdout-runs", "zero"),
    ("python benchmarks/time_to_quality.py", "--holdout-runs", "negative"),
    ("python benchmarks/time_to_quality.py", "--json", "proc"),
    ("python benchmarks/time_to_quality.py", "--checkpoint", "text file"),
    ("python -m tools.reference_models", "--runs", "negative"),
    ("omgpt evaluate", "--jobs", "thousand"),
    ("omgpt evaluate", "--alg-star-sampler", "empty"),
    ("omgpt fit", "--model.finetune.init_from", "text file"),
    ("omgpt fit", "--model.finetune.init_from", "nothing"),
]


@pytest.mark.parametrize("where,flag,key", PROBED, ids=[" ".join(p) for p in PROBED])
def test_the_probed_rows(where, flag, key, arena):
    found = [
        kc for kc in cached_cases(arena) if (kc[1].option.where, kc[1].option.flag, kc[1].key) == (where, flag, key)
    ]
    assert found, f"no case {where} {flag}={key}: the option is gone from its parser"
    problems = [p for kind, case in found if (p := check(kind, case, arena))]
    assert not problems, "\n".join(problems)


_CACHE: dict[str, list] = {}


def cached_cases(tmp: Path) -> list:
    if str(tmp) not in _CACHE:
        _CACHE[str(tmp)] = all_cases(tmp)
    return _CACHE[str(tmp)]


# The whole sweep runs in chunks, each in a fresh process: the ~4,300 cases run in one process grew it
# past 9 GB (every case builds its command's parsers and imports anew).
SWEEP_CHUNKS = 24


def sweep_chunk(index: int, chunks: int, tmp: str) -> None:
    """Chunk ``index`` of ``chunks`` of the whole sweep in ``tmp``: its problems printed, exit 1 if any."""
    arena = laid_out(Path(tmp))
    problems = sweep(all_cases(arena)[index::chunks], arena)
    if problems:
        print(f"{len(problems)} problems:\n" + "\n".join(problems))
        raise SystemExit(1)


@pytest.mark.fuzz
@pytest.mark.parametrize("chunk", range(SWEEP_CHUNKS))
def test_the_whole_sweep(chunk, tmp_path):
    code = f"from tests.test_fuzz import sweep_chunk; sweep_chunk({chunk}, {SWEEP_CHUNKS}, {str(tmp_path)!r})"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]


def test_adopt_never_replaces_a_shipped_model_by_accident(capsys):
    """``tools.reference_models adopt`` into a shipped name: refused without --replace (before the store
    is read), and with it refused for a model of another task (pretrained/mab-100-rl by a linear bandit)."""
    from omgpt.errors import OMGPTError
    from omgpt.model import load_model
    from tools import reference_models

    before = shipped()
    assert reference_models.main(["adopt", "mab-100-rl", "any-key", "--runs", "2"]) == 2
    assert "is a shipped model" in capsys.readouterr().err
    linear = load_model(ROOT / "pretrained" / "linear-bandit-100-rl").hparams
    with pytest.raises(OMGPTError, match="replaced only by one of its own task"):
        reference_models.check_replaceable("mab-100-rl", linear, "key", replace=True)
    reference_models.check_replaceable("mab-100-rl", load_model(ROOT / "pretrained" / "mab-100-rl").hparams, "k", True)
    assert shipped() == before


# --------------------------------------------------------------------------------------------------
# Hostile files: what the panel store and ``benchmarks/time_to_quality.py --resume`` read back (the
# store's entries; under --out an arm's trace, alg-star's cache, an arm's last.ckpt). A file that is not
# what its loader wrote -- empty, truncated, binary, a pickle, JSON too deep or of another shape, a field
# of the wrong type -- is one line naming it: refused (exit 2), or, where the file is only a cache or a
# trace the checkpoint can rebuild, computed again. Never a traceback, never code run.
def hostile_files(valid: dict, marker: Path, fields: dict[str, list], optional=()) -> dict[str, bytes]:
    """Hostile variants of the JSON file ``valid``: every kind of damage, and each of ``fields`` (key ->
    values of the wrong type) given each of its values, or missing (unless ``optional``)."""
    import json
    import pickle

    from tests.test_security import Payload

    text = json.dumps(valid).encode()
    files = {
        "empty": b"",
        "truncated": text[: len(text) // 2],
        "binary": bytes(range(256)) * 4,
        "a pickle": pickle.dumps({**valid, "payload": Payload(marker)}),
        "a JSON list": b"[1, 2, 3]",
        "JSON null": b"null",
        "nested too deeply": b"[" * 100_000,
        "not UTF-8": text.replace(b'"', b'"\xff', 1),
    }
    for key, values in fields.items():
        if key not in optional:
            files[f"{key} missing"] = json.dumps({k: v for k, v in valid.items() if k != key}).encode()
        files.update({f"{key} = {v!r}": json.dumps({**valid, key: v}).encode() for v in values})
    return files


def test_a_hostile_panel_store_entry_is_evaluated_again_in_one_line(tmp_path, capsys):
    import json

    from omgpt.commands.experiment.panel_store import read_panel, write_panel

    store, marker = tmp_path / "panels", tmp_path / "pwned"
    panel = {"title": "t", "task": "newsvendor", "task_options": {}, "horizon": 3, "model": "m", "policies": {}}
    write_panel(store, "k", panel, {"cells": [1.0]}, 2.0, title="t")
    valid = json.loads((store / "k.json").read_text())
    fields = {"panel": ["x", None, [], {"title": "t"}], "seconds": ["x", True, []], "state": []}
    problems = []
    for name, content in hostile_files(valid, marker, fields, optional=("seconds",)).items():  # (older entries)
        (store / "k.json").write_bytes(content)
        if read_panel(store, "k") is not None:
            problems.append(f"{name}: read as a stored panel")
        printed = capsys.readouterr().out
        if printed.count("\n") != 1 or f"{store / 'k.json'}:" not in printed:
            problems.append(f"{name}: not one line naming the file: {printed!r}")
    (store / "k.pkl").write_bytes(hostile_files(valid, marker, {})["a pickle"])  # an earlier version's entry
    (store / "k.json").unlink()
    if read_panel(store, "k") is not None:
        problems.append("k.pkl: read")
    assert not problems and not marker.exists(), "\n".join(problems)


TRACE_POINT = {"cpu_s": 1.5, "wall_s": 2.0, "step": 4, "regret": 3.0, "ratio": 1.2, "eval_cpu_s": 0.1}


def test_a_hostile_time_to_quality_trace_is_not_reused_in_one_line(tmp_path, capsys):
    from benchmarks.time_to_quality import finished_trace

    marker, trace = tmp_path / "pwned", tmp_path / "a-0123456789ab.json"
    valid = {"points": [TRACE_POINT], "steps": 4, "finished": True, "ckpt": "runs/a/epoch=0.ckpt"}
    fields = {
        "points": ["x", [], [{**TRACE_POINT, "cpu_s": "1.5"}], [{**TRACE_POINT, "ratio": None}], [3]],
        "steps": ["4", 4.5, None],
        "finished": ["yes", 1],
        "ckpt": [3, None],
    }
    problems = []
    for name, content in hostile_files(valid, marker, fields).items():
        trace.write_bytes(content)
        try:
            if finished_trace(trace) is not None:
                problems.append(f"{name}: reused")
        except Exception as e:  # a traceback on the command line
            problems.append(f"{name}: {type(e).__name__}: {e}")
        printed = capsys.readouterr().out
        if printed.count("\n") != 1 or str(trace) not in printed or "not reused" not in printed:
            problems.append(f"{name}: not one line naming the file: {printed!r}")
    assert not problems and not marker.exists(), "\n".join(problems)


def test_a_hostile_alg_star_cache_is_computed_again_in_one_line(tmp_path, capsys, monkeypatch):
    from benchmarks import time_to_quality as ttq

    marker = tmp_path / "pwned"
    monkeypatch.setattr(ttq, "validation_regret", lambda *a, **k: 2.5)
    setting = {"task": "newsvendor", "task_options": {}, "horizon": 3}
    ttq.alg_star_regret(setting, 2, 10_000, 2, tmp_path)
    (cache,) = tmp_path.glob("alg_star_*.json")
    valid = {"regret": 2.5, "cpu_s": 0.1, "task": "newsvendor", "horizon": 3, "val_runs": 2, "val_seed": 10_000}
    problems = []
    for name, content in hostile_files(valid, marker, {"regret": ["2.5", None, True, [2.5]]}).items():
        cache.write_bytes(content)
        capsys.readouterr()
        try:
            if ttq.alg_star_regret(setting, 2, 10_000, 2, tmp_path) != 2.5:
                problems.append(f"{name}: another regret")
        except Exception as e:
            problems.append(f"{name}: {type(e).__name__}: {e}")
        printed = capsys.readouterr().out
        if f"{cache}:" not in printed or "computed again" not in printed:
            problems.append(f"{name}: not said, naming the file: {printed!r}")
    assert not problems and not marker.exists(), "\n".join(problems)


def test_a_hostile_last_ckpt_under_resume_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    import torch

    from benchmarks.time_to_quality import resumable_checkpoint
    from omgpt.entry import guarded
    from tests.test_security import Payload

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # torch < 2.6's default
    marker, runs = tmp_path / "pwned", tmp_path / "a-0123456789ab"
    last = runs / "version_0" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    clock = {"cpu_s": 1.5, "wall_s": 2.0, "points": [TRACE_POINT]}
    saved = lambda content: torch.save(content, last)
    whole = (ROOT / "pretrained" / "newsvendor" / "model.ckpt").read_bytes()
    cases = {
        "empty": lambda: last.write_bytes(b""),
        "truncated": lambda: last.write_bytes(whole[: len(whole) // 2]),
        "binary": lambda: last.write_bytes(bytes(range(256)) * 4),
        "a pickle": lambda: saved({"state_dict": {}, "callbacks": {"QualityClock": Payload(marker)}}),
        "no state_dict": lambda: saved({"callbacks": {"QualityClock": clock}}),
        "clock a string": lambda: saved({"state_dict": {}, "callbacks": {"QualityClock": "x"}}),
        "cpu_s a string": lambda: saved({"state_dict": {}, "callbacks": {"QualityClock": {**clock, "cpu_s": "1"}}}),
        "points a dict": lambda: saved({"state_dict": {}, "callbacks": {"QualityClock": {**clock, "points": {}}}}),
        "a point's step": lambda: saved(
            {"state_dict": {}, "callbacks": {"QualityClock": {**clock, "points": [{**TRACE_POINT, "step": "4"}]}}}
        ),
    }
    problems = []
    for name, write in cases.items():
        write()
        capsys.readouterr()
        code = guarded(lambda: resumable_checkpoint(runs))
        err = capsys.readouterr().err.strip().splitlines()
        if code != 2 or len(err) != 1 or str(last) not in err[0]:
            problems.append(f"{name}: exit {code}, {err}")
    saved({"state_dict": {}, "callbacks": {"QualityClock": clock}})
    assert resumable_checkpoint(runs) == last  # the control: a sound one resumes
    assert not problems and not marker.exists(), "\n".join(problems)


def _copy_model(source, target):
    import shutil

    shutil.copytree(source, target, ignore=shutil.ignore_patterns("test", "replication", "spot", "*.png"))
    return target


@pytest.mark.parametrize(
    "what, source, reader",
    [
        ("card", "pretrained/newsvendor", "read_card"),
        ("store record", "results/models/newsvendor-01852b2938", "read_record"),
    ],
)
def test_a_hostile_card_or_store_record_is_one_line_naming_it(what, source, reader, tmp_path):
    """Every field of a card or a store record given values of the wrong type, missing, and the file
    damaged every way: the reader refuses it in one line naming the file (a RecordError, the CLI's exit
    2), never another exception, and no payload runs."""
    import json

    from omgpt.commands import store
    from omgpt.errors import OMGPTError

    folder = _copy_model(ROOT / source, tmp_path / "model")
    name = "card.json" if reader == "read_card" else "done.json"
    valid = json.loads((folder / name).read_text())
    wrong = [None, "x", 1.5, [], {"a": 1}, True]
    fields = {k: [v for v in wrong if type(v) is not type(valid[k])] for k in valid}
    optional = [k for k in valid if k not in getattr(store, "CARD" if reader == "read_card" else "RECORD")]
    optional += [
        k
        for k, kind in getattr(store, "CARD" if reader == "read_card" else "RECORD").items()
        if type(kind).__name__ == "Optional"
    ]
    schema = getattr(store, "CARD" if reader == "read_card" else "RECORD")
    marker, problems = tmp_path / "pwned", []
    for case, content in hostile_files(valid, marker, fields, optional=optional).items():
        (folder / name).write_bytes(content)
        try:
            getattr(store, reader)(folder)
            key = case.split(" = ")[0]
            # a field the readers check, of the wrong type (None means "none" in several: not wrong)
            if " = " in case and key in schema and not case.endswith("= None"):
                problems.append(f"{case}: accepted")
        except OMGPTError as e:
            if "\n" in str(e) or str(folder / name) not in str(e):
                problems.append(f"{case}: not one line naming the file: {e}")
        except Exception as e:  # noqa: BLE001 -- what the test is for
            problems.append(f"{case}: {type(e).__name__}: {e}")
    assert not problems and not marker.exists(), "\n".join(problems[:20])
