"""Evaluated panels, kept across runs: an experiment's evaluation resumed and spread over processes.

An experiment's panels can take hours (real demand: 24 panels of 25 policies, each benchmark fitted on
the training days and played on every test window), longer than a session, so each panel is written
to the store as soon as it is evaluated -- its numbers for ``experiment.json`` and what its kind keeps
from it to finish the experiment (:meth:`~omgpt.commands.experiment.registry.Kind.evaluate_with_state`:
real demand's window costs, pooled over the rolling origins at the end). A panel's file is named by a
hash of everything its numbers depend on:

* the panel as resolved (test task, options, horizon, policies, tuned setting, declared settings),
  the experiment and its kind;
* the test runs, seed and device;
* every model checkpoint's bytes and the panel's tuned constants (``configs/tuned``);
* the source of the code that evaluates: omgpt's tasks, policies, rollout, evaluation, network and
  analysis, the experiment's panels module and the kind's own module.

So a later run reuses a panel only when all of these are byte-identical: an interrupted run resumes
where it stopped, and ``--jobs N`` evaluates N panels at once in separate processes. The store is a
scratch folder (``runs/experiments/panels``, or ``panels/`` beside a ``--models-dir``), never part of
a report: deleting it costs only the time to evaluate again.

An entry is ``KEY.json``, plain JSON read by ``json`` alone, so no file in the store can run code (a
``KEY.pkl`` an earlier version wrote is never opened: its panel is evaluated again, as JSON). A kind's
state is stored as JSON too: arrays and tensors as (nested) lists, which its :meth:`finish` reads as it
reads arrays (``np.concatenate``, ``np.unique``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from dataclasses import asdict
from pathlib import Path

from omgpt.files import write_text

# the code a panel's numbers come from (beyond the kind's own module): modules, or packages read whole
EVALUATION_CODE = (
    "omgpt.tasks",
    "omgpt.policies",
    "omgpt.analysis",
    "omgpt.demand_data",
    "omgpt.rollout",
    "omgpt.evaluation",
    "omgpt.model",
    "omgpt.tuning",
    "omgpt.commands.experiment.panels",
)


def panel_store(models_dir: Path, default_models: Path) -> Path:
    """Where a run keeps its evaluated panels: ``runs/experiments/panels`` for the committed model
    store (``results/models``: the store itself is committed, its scratch is not), else ``panels/``
    beside the models (a quick run's, or a ``--models-dir``)."""
    root = default_models.parents[1]
    return root / "runs" / "experiments" / "panels" if models_dir == default_models else models_dir.parent / "panels"


@functools.lru_cache(maxsize=None)  # once per process: an experiment keys every panel with it
def _source_digest(kind_module: str) -> str:
    """The bytes of the evaluating code (a package's every ``.py``, wherever its folder lies: omgpt's
    ``analysis`` is the repository's ``analysis/``)."""
    h = hashlib.sha256()
    for name in (*EVALUATION_CODE, kind_module):
        module = importlib.import_module(name)
        folders = getattr(module, "__path__", None)
        files = sorted(f for d in folders for f in Path(d).rglob("*.py")) if folders else [Path(module.__file__)]
        for f in files:
            h.update(f"{name}:{f.name}".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _file_digest(path: Path) -> str:
    path = path / "model.ckpt" if path.is_dir() else path  # a model folder stands for the checkpoint in it
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"


def panel_key(exp, kind, panel, models: dict, runs: int, seed: int, device: str) -> str:
    """The content hash that names one panel's evaluation (the module docstring lists what it covers)."""
    from omgpt.tasks import make_episode_task
    from omgpt.tuning import setting_key, tuned_path

    tuned = tuned_path(
        setting_key(
            panel.tuned_task,
            make_episode_task(panel.tuned_task, panel.tuned_options, panel.horizon).options(),
            panel.horizon,
        )
    )
    what = {
        "experiment": exp.name,
        "kind": kind.name,
        # the note is what was measured about the panel, shown under it, not an input of its numbers:
        # editing it re-renders the report without evaluating again (evaluate_panels attaches it)
        "panel": {k: v for k, v in asdict(panel).items() if k != "note"},
        "runs": runs,
        "seed": seed,
        "device": str(device),
        "models": {name: _file_digest(Path(r["ckpt"])) for name, r in sorted(models.items()) if r.get("ckpt")},
        "tuned": _file_digest(tuned),
        "code": _source_digest(type(kind).__module__),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:20]


def read_panel(store: Path, key: str) -> tuple[dict, object, float | None] | None:
    """A stored panel's ``(numbers, state, seconds its evaluation took)`` (seconds ``None`` in an entry
    written before they were kept), or ``None``: never evaluated, or a file that is not a stored panel
    (not JSON -- truncated, binary, a pickle --, or JSON of another shape). Such a file is treated as
    absent, not refused: the panel is evaluated again and the file replaced, with a line naming it.
    Entries are written whole (:func:`omgpt.files.atomic_write`), so a damaged one was damaged from
    outside, and the store is scratch: evaluating again is always right, and never executes the file."""
    from omgpt.commands.experiment.results import PanelResult

    path = store / f"{key}.json"
    if not path.is_file():
        return None
    try:
        entry = json.loads(path.read_bytes())  # bytes: not UTF-8 is a ValueError too
    except (OSError, ValueError, RecursionError) as e:
        return _damaged(path, type(e).__name__)
    seconds = entry.get("seconds") if isinstance(entry, dict) else None
    if (
        not isinstance(entry, dict)
        or "state" not in entry
        or not isinstance(entry.get("panel"), dict)
        or not PanelResult.__required_keys__ <= entry["panel"].keys()
        or not (seconds is None or isinstance(seconds, (int, float)) and not isinstance(seconds, bool))
    ):
        return _damaged(path, "not a stored panel")
    return entry["panel"], entry["state"], seconds


def _damaged(path: Path, why: str) -> None:
    print(f"  {path}: {why}; the panel is evaluated again", flush=True)
    return None


def write_panel(store: Path, key: str, panel: dict, state: object, seconds: float, title: str) -> None:
    """Keep one evaluated panel and the wall-clock seconds its evaluation took (written whole or not at
    all), as JSON: arrays and tensors as lists; NaN kept as JSON's ``NaN`` token, which ``json`` reads back
    (the store is read by this module alone, and a panel read back must hold the numbers evaluated)."""
    from omgpt.resources import code_version

    entry = {"panel": panel, "state": state, "seconds": seconds, "title": title, "code_version": code_version()}
    write_text(store / f"{key}.json", json.dumps(entry, default=_as_list, allow_nan=True))


def _as_list(value: object) -> object:
    if hasattr(value, "tolist"):  # numpy and torch arrays and scalars
        return value.tolist()
    raise TypeError(f"a panel's numbers and state are stored as JSON, and {type(value).__name__} is not")
