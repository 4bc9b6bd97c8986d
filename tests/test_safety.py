"""Safety and bad input: non-finite losses, broken or foreign checkpoints, invalid configs.

Each ends with one line ``omgpt: error: ...`` on stderr and exit code 2, and nothing already written
is overwritten. (tests/test_cli.py covers the evaluate-side basics: unknown task/policy/option,
a missing checkpoint, ``--task pricing`` with a newsvendor checkpoint, a truncated checkpoint.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from omgpt.commands.cli import cli_main
from omgpt.module import load_module
from tests.ddp_probe import file_hash

ROOT = Path(__file__).resolve().parents[1]
NEWSVENDOR, TINY = str(ROOT / "configs/newsvendor.yaml"), str(ROOT / "configs/scale/tiny.yaml")


def fit_args(save_dir: Path, *extra: str) -> list[str]:
    return [
        "fit", "--config", NEWSVENDOR, "--config", TINY, "--model.horizon", "12",
        "--trainer.logger.init_args.save_dir", str(save_dir),
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        *extra,
    ]  # fmt: skip


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    lines = [l for l in err.splitlines() if not l.startswith("Seed set")]
    assert len(lines) == 1 and lines[0].startswith("omgpt: error:") and "Traceback" not in err, err
    return lines[0]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the sha256 of its bytes."""
    return {str(p.relative_to(folder)): file_hash(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished tiny newsvendor fit; returns its run folder's save_dir."""
    tmp = tmp_path_factory.mktemp("fit")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sys, "argv", ["omgpt"])
        assert cli_main(fit_args(tmp / "runs")) == 0
    return tmp / "runs"


def last_ckpt(runs: Path) -> Path:
    (last,) = runs.rglob("last.ckpt")
    return last


# --------------------------------------------------------------------------------------------------
def test_non_finite_loss_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    """A weight turns NaN at step 3 (a test-only callback, as a blown-up update would): the fit stops
    with one line and exit 2, and the step checkpoint written after step 3 -- the last good state --
    is left exactly as it was, and loads."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    ft = tmp_path / "ft.yaml"  # configs/trainer/fault_tolerant.yaml, a checkpoint after every step
    ft.write_text(
        (ROOT / "configs/trainer/fault_tolerant.yaml")
        .read_text()
        .replace("every_n_train_steps: 500", "every_n_train_steps: 1")
    )
    args = fit_args(tmp_path / "runs", "--config", str(ft), "--trainer.callbacks+=tests.ddp_probe.Poison",
                    "--trainer.callbacks.out", str(tmp_path / "poison"), "--trainer.callbacks.at_step", "3")  # fmt: skip
    assert cli_main(args) == 2
    line = one_line_error(capsys)
    assert "non-finite training loss at step 3" in line and "training stopped" in line, line

    before = json.loads((tmp_path / "poison" / "before.json").read_text())
    last = last_ckpt(tmp_path / "runs")
    assert str(last) in before and file_hash(last) == before[str(last)], "last.ckpt changed after the failure"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 3
    module = load_module(str(last))
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert sorted(p.name for p in last.parent.glob("*.ckpt")) == ["last.ckpt"], "nothing else was written"


@pytest.mark.parametrize("bad", ["missing", "truncated", "garbage", "not-a-checkpoint"])
def test_broken_checkpoint_for_fit_resume_is_one_line_exit_2(bad, trained, tmp_path, capsys):
    path = tmp_path / "x.ckpt"
    if bad == "missing":
        pass
    elif bad == "truncated":
        path.write_bytes(last_ckpt(trained).read_bytes()[:5000])
    elif bad == "garbage":
        path.write_bytes(b"\x00not a checkpoint" * 100)
    else:
        torch.save({"weights": torch.zeros(3)}, path)
    assert cli_main(fit_args(tmp_path / "runs", "--ckpt_path", str(path))) == 2
    line = one_line_error(capsys)
    expected = {"missing": "checkpoint not found", "not-a-checkpoint": "is not a Lightning checkpoint"}.get(
        bad, "cannot read checkpoint"
    )
    assert expected in line, line
    assert not (tmp_path / "runs").exists(), "a failed fit writes nothing"


def test_checkpoint_of_another_task_is_refused_by_fit_and_validate(trained, tmp_path, capsys):
    ckpt = str(last_ckpt(trained))
    for command in ("fit", "validate"):
        args = fit_args(tmp_path / "runs", "--model.task", "pricing", "--ckpt_path", ckpt)
        assert cli_main([command, *args[1:]]) == 2
        assert "trained on task 'newsvendor', not 'pricing'" in one_line_error(capsys)
    assert not (tmp_path / "runs").exists()


def test_evaluate_of_another_task_keeps_an_existing_out_folder(trained, tmp_path, capsys):
    out = tmp_path / "eval"
    ok = [
        "evaluate",
        "--task",
        "newsvendor",
        "--policies",
        "oracle,erm",
        "--runs",
        "4",
        "--horizon",
        "6",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli_main(ok) == 0
    capsys.readouterr()
    before = snapshot(out)
    assert "summary.json" in before
    failing = [
        [
            "evaluate",
            "--task",
            "pricing",
            "--policies",
            "omgpt,oracle",
            "--ckpt",
            str(last_ckpt(trained)),
            "--out",
            str(out),
        ],
        ["evaluate", "--task", "newsvendor", "--policies", "oracle,bogus", "--out", str(out)],
        [
            "evaluate",
            "--task",
            "newsvendor",
            "--policies",
            "omgpt",
            "--ckpt",
            str(ROOT / "README.md"),
            "--out",
            str(out),
        ],
    ]
    for args in failing:
        assert cli_main(args) == 2
        one_line_error(capsys)
        assert snapshot(out) == before, f"{args} touched {out}"


CONFIG_ERRORS = {
    "unknown key in a config file": ("model:\n  n_layr: 2\n", "model.n_layr"),
    "bad type in a config file": (
        "data:\n  batch_size: sixty\n",
        "data.batch_size: Expected a <class 'int'>. Got value: sixty",
    ),
    "bad value in a config file": ("data:\n  batch_size: -3\n", "data.batch_size must be a positive integer, got -3"),
    "YAML syntax error": ("model: [1, 2\n", "Problems parsing config"),
    "not a mapping": ("just a string\n", "just a string"),
    "unknown callback class": (
        "trainer:\n  callbacks:\n    - class_path: omgpt.callbacks.Nope\n",
        "module 'omgpt.callbacks' has no attribute 'Nope'",
    ),
    # configs/scale/tiny.yaml has both parts of Algorithm 1, each applied by its callback
    "a list that replaces another drops a part of Algorithm 1": (
        "trainer:\n  callbacks:\n    - class_path: omgpt.callbacks.Curriculum\n",
        "data.algorithm1.mixed is set but trainer.callbacks has no omgpt.callbacks.SelfRolloutRefresh to apply it",
    ),
    "a callback whose part is off": (
        "data:\n  algorithm1: {curriculum: null}\n",
        "trainer.callbacks has omgpt.callbacks.Curriculum but data.algorithm1.curriculum is null",
    ),
    "a part's callback listed twice": (
        "trainer:\n  callbacks+:\n    - class_path: omgpt.callbacks.SelfRolloutRefresh\n",
        "trainer.callbacks lists omgpt.callbacks.SelfRolloutRefresh 2 times",
    ),
}


@pytest.mark.parametrize("case", list(CONFIG_ERRORS))
def test_invalid_config_files_are_one_line_exit_2_and_leave_runs_alone(case, trained, tmp_path, capsys):
    text, message = CONFIG_ERRORS[case]
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    before = snapshot(trained)
    assert cli_main(fit_args(trained, "--config", str(bad))) == 2  # into the finished run's save_dir
    line = one_line_error(capsys)
    assert message in line, line
    assert snapshot(trained) == before, "a failed fit touched a previous run"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model.network.n_layer", "abc"], "model.network.n_layer: Expected a <class 'int'>. Got value: abc"),
        (["--trainer.max_epochs", "many"], "trainer.max_epochs"),
        (["--data.num_workers", "1.5"], "data.num_workers"),
        (["--model.optim.schedule", "linear"], "schedule must be 'constant' or 'cosine'"),
        (["--model.network.n_layer", "0"], "model.network.n_layer must be a positive integer, got 0"),
        # refused from the estimate, before a block is allocated (it once took every byte of the machine)
        (["--model.network.n_layer", "1000000000000"], "a network of 1000000000000 layers x 16 dims"),
        (["--model.network.layout", "spiral"], "model.network.layout must be one of paper, compact, transition"),
        (["--data.algorithm1.mixed.kappa", "1.5"], "data.algorithm1.mixed.kappa must be a number in [0, 1), got 1.5"),
        (
            ["--data.algorithm1.curriculum.stage_epochs", "0"],
            "data.algorithm1.curriculum.stage_epochs must be a positive",
        ),
        (["--data.algorithm1.mixed.bogus", "3"], "Option 'bogus' is not accepted"),
    ],
)
def test_invalid_command_line_values_are_one_line_exit_2(args, message, tmp_path, capsys):
    assert cli_main(fit_args(tmp_path / "runs", *args)) == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "runs").exists()
