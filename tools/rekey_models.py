"""Move the model store's finished models to the keys today's configs give them.

    python -m tools.rekey_models --dry-run     # say what would move
    python -m tools.rekey_models               # move them, and rewrite every reference to an old key

A model's key hashes its fit arguments and the parsed settings of its config files
(:func:`omgpt.commands.experiment.models.run_key`). A refactor that changes how the configs say a
setting but not what the fit does -- ``model.network`` grouping the network's settings, ``data.algorithm1``
replacing Algorithm 1's callbacks -- changes every key, so each stored model would train again. This tool
recomputes each finished model's key from its own record (``done.json``: the command it was fitted with,
and the key of the model it started from), parents before the children whose keys cover theirs, moves
the folder, and rewrites the old key wherever the README, results/, pretrained/, docs/ and tests/ name it
(JSON, Markdown, text and Python files: experiment records, reports, cards, tests that read a stored model). Run it only after a refactor shown to leave every fit unchanged
(for ``data.algorithm1``: the instantiated schedule of every experiment's models compared before and
after); a setting that really changed must train a new model, which this would hide.
"""

from __future__ import annotations

import sys
import shlex
from pathlib import Path

from omgpt.commands.experiment.models import ROOT, _init_arguments, run_key
from omgpt.records import read_json
from omgpt.entry import InputFolder, entry_point, script_parser

# where keys are named: records, reports, cards, pages, tests that read a stored model
REFERENCES = ("README.md", "results", "pretrained", "docs", "tests")
SUFFIXES = (".json", ".md", ".txt", ".py")


def record_key(record: dict, parent_key: str | None) -> str:
    """The key the fit ``record`` describes under today's configs: its command's arguments (less the
    starting checkpoint's path, whose parent the key names by ``parent_key`` instead)."""
    args = shlex.split(record["command"])[2:]  # after "omgpt fit"
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
    """Old key -> new key of every finished model in ``models_dir`` whose key changed."""
    records = {
        d.name: read_json(d / "done.json", what="model record")
        for d in sorted(models_dir.glob("*/"))
        if (d / "done.json").is_file()
    }
    moved: dict[str, str] = {}
    done: set[str] = set()

    def ready(name: str) -> bool:  # its parent re-keyed first (a reference model's, pretrained/NAME, stays)
        parent = records[name].get("init_from")
        return parent is None or parent in done or parent not in records

    while len(done) < len(records):
        for old in [k for k in records if k not in done and ready(k)]:
            parent = records[old].get("init_from")
            new = record_key(records[old], moved.get(parent, parent))
            if new != old:
                moved[old] = new
            done.add(old)
    return moved


def rewrite_references(moved: dict[str, str], roots=REFERENCES) -> list[Path]:
    """Every JSON, Markdown, text and Python file in ``roots`` (files or folders, relative to the
    repository or absolute) naming an old key, rewritten to name the new one."""
    changed = []
    for root in roots:
        top = ROOT / root  # an absolute root stays itself
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            text = new = path.read_text()
            for old, key in moved.items():
                new = new.replace(old, key)
            if new != text:
                path.write_text(new)
                changed.append(path)
    return changed


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument("--models-dir", type=InputFolder(), default=ROOT / "results" / "models")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    moved = new_keys(a.models_dir)
    for old, new in moved.items():
        print(f"{old} -> {new}")
    if a.dry_run or not moved:
        print(f"{len(moved)} model(s) {'would move' if a.dry_run else 'to move'}")
        return
    for old, new in moved.items():
        (a.models_dir / old).rename(a.models_dir / new)
    changed = rewrite_references(moved)
    print(f"{len(moved)} model(s) moved; {len(changed)} file(s) rewritten")


if __name__ == "__main__":
    sys.exit(main())
