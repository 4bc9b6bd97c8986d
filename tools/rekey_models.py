"""Move the model store's finished models to the keys today's configs give them.

    python -m tools.rekey_models            # say what would move and which files would be rewritten
    python -m tools.rekey_models --apply    # move them, and rewrite the references to each old key

A model's key hashes its fit arguments and the parsed settings of its config files
(:func:`omgpt.commands.experiment.models.run_key`). A refactor that changes how the configs say a
setting but not what the fit does -- ``model.network`` grouping the network's settings, ``data.algorithm1``
replacing Algorithm 1's callbacks -- changes every key, so each stored model would train again. This tool
recomputes each finished model's key from its own record (``done.json``: the command it was fitted with,
and the key of the model it started from), parents before the children whose keys cover theirs, moves
the folder, and rewrites the references to the old key. Run it only after a refactor shown to leave every
fit unchanged (``bash tools/same_fits.sh REV``); a setting that really changed must train a new model,
which this would hide. A model that would move onto a key the store holds already is refused: that is
no refactor's doing (a child of a re-shipped reference model, a setting that changed), and moving it
would replace the model that key names.

References are rewritten only where they name a model: in JSON (the store's records, experiment records,
cards, summaries) the fields ``key``, ``init_from`` and ``store_key`` that equal an old key, and the
``ckpt`` paths and ``command`` arguments that lie in an old model's folder; in Markdown, text, YAML and
Python files (reports, cards, pages, tests that read a stored model) an old key only where it is a whole
word of a key's shape (``task-<10 hex digits>``). Nothing else is touched: a store folder of another name
(a copy called ``tmp``) moves, but no text is rewritten for it. The checkout's files (README.md,
results/, pretrained/, docs/, tests/, benchmarks/, configs/, tools/) are rewritten only for the
checkout's own store (results/models); for another ``--models-dir``, only that store's records.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

from omgpt.commands.experiment.models import ROOT, _init_arguments, run_key
from omgpt.entry import InputFolder, entry_point, script_parser
from omgpt.errors import OMGPTError
from omgpt.files import write_text
from omgpt.records import Optional, RecordError, read_json

STORE = ROOT / "results" / "models"
# where the checkout names a store key: records, reports, cards, pages, tests, benchmarks, configs, tools
REFERENCES = ("README.md", "results", "pretrained", "docs", "tests", "benchmarks", "configs", "tools")
SUFFIXES = (".json", ".md", ".txt", ".py", ".yaml", ".yml")
KEY_FIELDS = ("key", "init_from", "store_key")  # JSON fields whose value is a store key
PATH_FIELDS = ("ckpt", "command")  # JSON fields holding paths: a checkpoint, a command's arguments
RECORD = {"task": str, "command": str, "init_from": Optional(str)}  # what a key is computed from


def record_key(record: dict, parent_key: str | None, where: Path | str = "done.json") -> str:
    """The key the fit ``record`` describes under today's configs: its command's arguments (less the
    starting checkpoint's path, whose parent the key names by ``parent_key`` instead)."""
    try:
        args = shlex.split(record["command"])
    except ValueError as e:  # an unbalanced quote: no arguments to hash
        raise RecordError(f"{where}: key 'command': {e}") from None
    if args[:2] != ["omgpt", "fit"]:
        raise RecordError(f"{where}: key 'command': not an 'omgpt fit' command")
    args = args[2:]
    for flag in ("--model.init_from", "--model.finetune.init_from"):  # the flag before and after model.finetune
        if flag in args:
            i = args.index(flag)
            del args[i : i + 2]
    args = [
        str(ROOT / a) if i and args[i - 1] == "--config" and not Path(a).is_absolute() else a
        for i, a in enumerate(args)
    ]
    return run_key(record["task"], args + _init_arguments(parent_key))


def new_keys(models_dir: Path) -> dict[str, str]:
    """Old key -> new key of every finished model in ``models_dir`` whose key changed; refused (one
    line, nothing moved) where records start from each other or a new key is taken."""
    paths = {d.name: d / "done.json" for d in sorted(models_dir.glob("*/")) if (d / "done.json").is_file()}
    records = {name: read_json(path, RECORD, "store record") for name, path in paths.items()}
    moved: dict[str, str] = {}
    done: set[str] = set()

    def ready(name: str) -> bool:  # its parent re-keyed first (a reference model's, pretrained/NAME, stays)
        parent = records[name].get("init_from")
        return parent is None or parent in done or parent not in records

    while len(done) < len(records):
        batch = [k for k in records if k not in done and ready(k)]
        if not batch:  # every model left waits on another one left: init_from goes round in a loop
            left = sorted(k for k in records if k not in done)
            raise OMGPTError(
                f"{models_dir}: the records of {', '.join(left)} wait on each other (init_from goes round a loop); nothing moved"
            )
        for old in batch:
            parent = records[old].get("init_from")
            new = record_key(records[old], moved.get(parent, parent), paths[old])
            if new != old:
                moved[old] = new
            done.add(old)
    targets: dict[str, str] = {}
    for old, new in moved.items():
        if new in targets:
            raise OMGPTError(f"{models_dir}: {targets[new]} and {old} would both move to {new}; nothing moved")
        if (models_dir / new).exists():
            raise OMGPTError(
                f"{models_dir}: {old} would move onto {new}, a model the store holds already (a setting or a "
                "reference model that changed, not a refactor: retrain it or remove it); nothing moved"
            )
        targets[new] = old
    return moved


def _key_shaped(key: str) -> bool:
    """``task-<10 hex digits>``: what run_key names, and only then a word worth finding in prose."""
    return re.fullmatch(r"[a-z][a-z0-9-]*-[0-9a-f]{10}", key) is not None


def _moved_path(value: str, moved: dict[str, str], models_dir: Path) -> str:
    """``value`` (a path, relative to the repository or absolute) with an old model's folder replaced
    by the new one's, written as it was written; anything else unchanged."""
    path = Path(value)
    full = (path if path.is_absolute() else ROOT / path).resolve()
    for old, new in moved.items():
        try:
            rest = full.relative_to((models_dir / old).resolve())
        except ValueError:
            continue
        # the folder's own name is the last part before the rest: swap that part only
        parts = list(path.parts)
        i = len(parts) - len(rest.parts) - 1
        if i >= 0 and parts[i] == old:
            parts[i] = new
            return str(Path(*parts))
    return value


def _rewritten_json(value, moved: dict[str, str], models_dir: Path, field: str | None = None):
    """A parsed JSON value with the references of :data:`KEY_FIELDS` and :data:`PATH_FIELDS` rewritten."""
    if isinstance(value, dict):
        return {k: _rewritten_json(v, moved, models_dir, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewritten_json(v, moved, models_dir, field) for v in value]
    if not isinstance(value, str):
        return value
    if field in KEY_FIELDS:
        return moved.get(value, value)
    if field == "ckpt":
        return _moved_path(value, moved, models_dir)
    if field == "command":
        try:
            args = shlex.split(value)
        except ValueError:  # not a command line: no paths to find in it
            return value
        for a in args:
            b = _moved_path(a, moved, models_dir)
            if b != a:  # the argument as written (commands are shlex.join's: a plain path is verbatim)
                value = value.replace(a, b)
        return value
    return value


def _rewritten(path: Path, text: str, moved: dict[str, str], models_dir: Path) -> str:
    """The text of ``path`` naming each new key where it named an old one (see the module's docstring)."""
    if path.suffix == ".json":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return text  # not a record: nothing in it is read as a key
        new = _rewritten_json(value, moved, models_dir)
        if new == value:
            return text
        # written again in the layout it has (the project writes indent 1 or 2 and a final newline)
        layout = next((i for i in (1, 2, None) if json.dumps(value, indent=i) + "\n" == text), 2)
        return json.dumps(new, indent=layout) + "\n"
    for old, new in moved.items():
        if _key_shaped(old):
            text = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, text)
    return text


def rewrite_references(moved: dict[str, str], roots, models_dir: Path = STORE) -> dict[Path, str]:
    """Path -> new text of every file in ``roots`` (files or folders, relative to the repository or
    absolute) that names an old key; nothing is written here. ``models_dir``: the store the keys are of
    (a ``ckpt`` path is rewritten only where it lies in that store)."""
    changed = {}
    for root in roots if moved else ():
        top = ROOT / root  # an absolute root stays itself
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            text = path.read_text()
            new = _rewritten(path, text, moved, models_dir)
            if new != text:
                changed[path] = new
    return changed


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument("--models-dir", type=InputFolder(), default=STORE)
    p.add_argument(
        "--apply", action="store_true", help="move the models and rewrite the references (else: say what would be)"
    )
    a = p.parse_args(argv)
    store = a.models_dir.resolve()
    moved = new_keys(store)
    # the checkout's files name the checkout's store's keys, not another store's: for another store, its own records
    changes = rewrite_references(moved, REFERENCES if store == STORE.resolve() else [store], store)
    for old, new in moved.items():
        print(f"{old} -> {new}")
    for path in changes:
        print(f"  rewrites {_shown(path)}")
    if not a.apply:
        print(f"{len(moved)} model(s) would move, {len(changes)} file(s) would be rewritten (--apply to do it)")
        return
    for old, new in moved.items():
        (store / old).rename(store / new)
    for path, text in changes.items():
        write_text(_after_move(path, moved, store), text)
    print(f"{len(moved)} model(s) moved; {len(changes)} file(s) rewritten")


def _after_move(path: Path, moved: dict[str, str], store: Path) -> Path:
    """Where ``path`` is once the models have moved (a moved model's own record moved with it)."""
    for old, new in moved.items():
        if path.is_relative_to(store / old):
            return store / new / path.relative_to(store / old)
    return path


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
