"""No file the project reads can run code: every loader of a file a user (or anyone who can write into
a run folder, a store or ``--out``) can place is given a pickle whose unpickling writes a marker file,
and the marker never appears; each refusal is one line (``omgpt: error:``, exit code 2), or, where a
loader treats a bad file as absent (the panel store, alg-star's cache), the file is computed again.

torch before 2.6 unpickles anything by default: every case runs with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``,
so a ``torch.load`` that leaves ``weights_only`` to the default would run the payload here (the positive
controls show the payload does run when loaded that way, so these tests can fail).

The loaders: checkpoints (``omgpt evaluate --ckpt``, ``omgpt fit --ckpt_path`` / ``init_from``), the panel
store, model cards, store records, tuned constants, ``experiment.json`` (``--redraw``), and
``benchmarks/time_to_quality.py --resume`` (an arm's ``last.ckpt``, its trace, alg-star's cache).
"""

from __future__ import annotations

import ast
import json
import pickle
import shutil
import sys
from pathlib import Path

import pytest
import torch

from omgpt.commands.cli import cli_main
from omgpt.entry import guarded

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("omgpt", "benchmarks", "tools", "callbacks", "datamodules", "analysis", "examples")


class Payload:
    """Unpickling this creates ``marker``: what a malicious file would do instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def marker(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # torch < 2.6's default: unpickle anything
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    return tmp_path / "pwned"


def pickled(marker: Path) -> bytes:
    return pickle.dumps({"panel": {}, "regret": 1.0, "payload": Payload(marker)})


def malicious_checkpoint(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "callbacks": {"QualityClock": {}}, "payload": Payload(marker)}, path)
    return path


def refused(capsys, code: int) -> str:
    """The command's one line: exit code 2, ``omgpt: error: ...``, no traceback."""
    err = capsys.readouterr().err
    lines = [l for l in err.strip().splitlines() if not l.startswith("Seed set")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("omgpt: error:"), (code, err[-2000:])
    return lines[0]


# --------------------------------------------------------------------------------------------------
# The controls: the payload runs when loaded the unsafe way.
def test_the_payload_runs_under_a_plain_unpickling(tmp_path):
    pickle.loads(pickled(tmp_path / "pwned"))
    assert (tmp_path / "pwned").exists()


def test_the_payload_runs_under_torch_load_with_the_old_default(marker):
    torch.load(malicious_checkpoint(marker.parent / "x.ckpt", marker))
    assert marker.exists()


# --------------------------------------------------------------------------------------------------
# No loader in the tree unpickles.
def unsafe_loads(source: str) -> list[int]:
    """Lines of ``source`` that unpickle: ``torch.load`` without ``weights_only=True``, ``pickle``'s
    loaders, yaml's unsafe loaders, ``numpy.load(allow_pickle=True)``, pandas' ``read_pickle``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("pickle", "_pickle", "cPickle", "dill"):
            found += [node.lineno for a in node.names if a.name in ("load", "loads", "Unpickler")]
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
        name, keywords = node.func.attr, {k.arg: k.value for k in node.keywords}
        safe = isinstance(keywords.get("weights_only"), ast.Constant) and keywords["weights_only"].value is True
        pickling = isinstance(keywords.get("allow_pickle"), ast.Constant) and keywords["allow_pickle"].value is True
        if (
            (owner == "torch" and name == "load" and not safe)
            or (owner in ("pickle", "_pickle", "cPickle", "dill", "joblib") and name in ("load", "loads", "Unpickler"))
            or (owner == "yaml" and name in ("load", "unsafe_load", "full_load", "load_all"))
            or (owner in ("np", "numpy") and name == "load" and pickling)
            or (owner in ("pd", "pandas") and name == "read_pickle")
        ):
            found.append(node.lineno)
    return found


def test_the_scan_finds_every_unsafe_load():
    """The scan of the next test can fail: each of these lines is found, and only these."""
    bad = [
        "torch.load(path)",
        "torch.load(path, weights_only=False)",
        "torch.load(path, **kwargs)",
        "pickle.load(f)",
        "pickle.loads(data)",
        "from pickle import loads",
        "yaml.load(text, Loader=yaml.Loader)",
        "np.load(path, allow_pickle=True)",
    ]
    good = ["torch.load(path, map_location='cpu', weights_only=True)", "pickle.dumps(x)", "yaml.safe_load(t)"]
    assert sorted(unsafe_loads("\n".join(bad + good))) == list(range(1, len(bad) + 1))


def test_no_file_in_the_tree_unpickles_untrusted_bytes():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in SOURCES
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in unsafe_loads(path.read_text())
    ]
    assert not found, f"unpickling loaders (use omgpt.checkpoints.read_checkpoint, or JSON): {found}"


# --------------------------------------------------------------------------------------------------
# Checkpoints.
def test_a_malicious_checkpoint_given_to_evaluate_never_runs(marker, tmp_path, capsys):
    ckpt = malicious_checkpoint(tmp_path / "model.ckpt", marker)
    code = cli_main(
        ["evaluate", "--ckpt", str(ckpt), "--policies", "omgpt", "--runs", "2", "--out", str(tmp_path / "o")]
    )
    line = refused(capsys, code)
    assert "refusing to load checkpoint" in line and str(ckpt) in line, line
    assert not marker.exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", ["--ckpt_path", "--model.finetune.init_from"])
def test_a_malicious_checkpoint_given_to_fit_never_runs(option, marker, tmp_path, capsys):
    from tests.test_safety import fit_args

    ckpt = malicious_checkpoint(tmp_path / "last.ckpt", marker)
    line = refused(capsys, cli_main(fit_args(tmp_path / "runs", option, str(ckpt))))
    assert "refusing to load checkpoint" in line and str(ckpt) in line, line
    assert not marker.exists()


# --------------------------------------------------------------------------------------------------
# The panel store: an entry that is not JSON is treated as absent (evaluated again), never loaded.
@pytest.mark.parametrize("name", ["KEY.json", "KEY.pkl"])
def test_a_pickle_in_the_panel_store_is_never_loaded_and_is_evaluated_again(name, marker, tmp_path, capsys):
    from omgpt.commands.experiment.panel_store import read_panel, write_panel

    store = tmp_path / "panels"
    store.mkdir()
    (store / name.replace("KEY", "k0")).write_bytes(pickled(marker))
    assert read_panel(store, "k0") is None  # evaluated again
    assert not marker.exists()
    if name.endswith(".json"):
        assert "k0.json: UnicodeDecodeError; the panel is evaluated again" in capsys.readouterr().out
    panel = {"title": "t", "task": "newsvendor", "task_options": {}, "horizon": 3, "model": "m"}
    write_panel(store, "k0", panel, None, 1.0, title="t")  # ... and the evaluation replaces it
    assert read_panel(store, "k0") == (panel, None, 1.0) and not marker.exists()


# --------------------------------------------------------------------------------------------------
# Records: cards, store records, tuned constants, experiment.json.
def test_a_pickle_as_a_model_card_stops_the_experiment_in_one_line(marker, tmp_path, monkeypatch, capsys):
    import omgpt.commands.experiment.models as models

    folder = tmp_path / "pretrained" / "newsvendor"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "pretrained/newsvendor/model.ckpt", folder / "model.ckpt")
    (folder / "card.json").write_bytes(pickled(marker))
    monkeypatch.setattr(models, "PRETRAINED", tmp_path / "pretrained")
    args = ["experiment", "horizon-generalisation", "--models-dir", str(tmp_path / "m"), "--out", str(tmp_path / "o")]
    line = refused(capsys, cli_main(args))
    assert "card.json: not a text model card (binary content)" in line, line
    assert not marker.exists() and not (tmp_path / "o").exists()


def test_a_pickle_as_a_store_record_is_one_line(marker, tmp_path, capsys):
    from omgpt.commands.store import read_record

    folder = tmp_path / "slot"
    folder.mkdir()
    (folder / "done.json").write_bytes(pickled(marker))
    line = refused(capsys, guarded(lambda: read_record(folder)))
    assert "done.json: not a text store record" in line and not marker.exists(), line


def test_a_pickle_as_tuned_constants_is_one_line(marker, tmp_path, capsys):
    from omgpt.tuning import read_tuned

    path = tmp_path / "newsvendor-T12.json"
    path.write_bytes(pickled(marker))
    line = refused(capsys, guarded(lambda: read_tuned(path)))
    assert str(path) in line and not marker.exists(), line


def test_a_pickle_as_experiment_json_stops_the_redraw_in_one_line(marker, tmp_path, capsys):
    out = tmp_path / "main-results"
    shutil.copytree(ROOT / "results" / "main-results", out)
    (out / "experiment.json").write_bytes(pickled(marker))
    line = refused(capsys, cli_main(["experiment", "main-results", "--redraw", "--out", str(out)]))
    assert "experiment.json" in line and not marker.exists(), line


# --------------------------------------------------------------------------------------------------
# time_to_quality --resume: an arm's last.ckpt, its trace, alg-star's cache under --out.
def test_time_to_quality_never_loads_a_pickle_under_its_out(marker, tmp_path, capsys, monkeypatch):
    """A pickle as an arm's trace is not reused (one line, the arm goes on from its checkpoint), as
    alg-star's cache is computed again; a malicious last.ckpt then stops the run in one line naming it,
    before the arm trains. Nothing ever runs the payload."""
    from benchmarks import time_to_quality as ttq

    played = []
    monkeypatch.setattr(ttq, "validation_regret", lambda *a, **k: played.append(1) or 2.0)  # alg-star, cheaply
    out = tmp_path / "runs"
    setting = "--model.task newsvendor --model.horizon 5 --trainer.max_epochs 1"
    argv = ["--arm", f"a=configs/scale/tiny.yaml {setting}", "--val-runs", "2", "--out", str(out), "--resume"]
    fits = []

    def first_fit(cmd, threads):  # where the arm's files would be: its trace, its runs' folder
        fits.append(Path(cmd[cmd.index("--trainer.logger.init_args.name") + 1]))
        raise ttq.OMGPTError("stopped before the fit")

    monkeypatch.setattr(ttq, "run_fit", first_fit)
    assert ttq.main(argv) == 2
    capsys.readouterr()
    (cache,) = out.glob("alg_star_*.json")
    trace = out / f"{fits[0].name}.json"
    for path in (cache, trace):
        path.write_bytes(pickled(marker))
    last = malicious_checkpoint(out / fits[0].name / "version_0/checkpoints/last.ckpt", marker)
    monkeypatch.setattr(ttq, "run_fit", lambda cmd, threads: pytest.fail("the arm trained"))
    code = ttq.main(argv)
    printed = capsys.readouterr()
    lines = [l for l in printed.err.strip().splitlines() if not l.startswith("Seed set")]
    assert code == 2 and len(lines) == 1, printed.err[-2000:]
    assert "refusing to load checkpoint" in lines[0] and str(last) in lines[0], lines[0]
    assert f"{cache}: not a text alg-star cache (binary content): computed again" in printed.out
    assert f"{trace}: not a text trace (binary content): not reused" in printed.out
    assert len(played) == 2 and json.loads(cache.read_text())["regret"] == 2.0  # the cache computed again
    assert not marker.exists()
