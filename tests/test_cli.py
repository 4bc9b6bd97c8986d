"""End to end through the command line: fit -> checkpoint -> evaluate, the demo, and user errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from omgpt.commands.cli import cli_main
from omgpt.commands.args import PositiveInt, flags, parse
from omgpt.errors import OMGPTError

ROOT = Path(__file__).resolve().parents[1]
NEWSVENDOR = str(ROOT / "configs/newsvendor.yaml")
TINY = str(ROOT / "configs/scale/tiny.yaml")


def fit_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "fit",
        "--config",
        NEWSVENDOR,
        "--config",
        TINY,
        "--model.horizon",
        "12",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--trainer.enable_progress_bar",
        "false",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One tiny fit through the CLI; returns its last checkpoint."""
    tmp = tmp_path_factory.mktemp("fit")
    assert cli_main(fit_args(tmp)) == 0
    ckpts = sorted((tmp / "runs").rglob("last.ckpt"))
    assert len(ckpts) == 1
    run_dir = ckpts[0].parents[1]
    assert (run_dir / "config.yaml").is_file(), "the run folder keeps the resolved config"
    assert (run_dir / "metrics.csv").is_file(), "CSV logger is the default"
    return ckpts[0]


def test_fit_writes_checkpoint_and_evaluate_writes_the_contract(trained, tmp_path, capsys):
    out = tmp_path / "eval"
    code = cli_main(
        [
            "evaluate",
            "--task",
            "newsvendor",
            "--policies",
            "omgpt,oracle,erm,fai",
            "--ckpt",
            str(trained),
            "--runs",
            "6",
            "--horizon",
            "12",
            "--seed",
            "3",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["task"] == "newsvendor" and summary["horizon"] == 12 and summary["runs"] == 6 and summary["seed"] == 3
    )
    assert set(summary["policies"]) == {"omgpt", "oracle", "erm", "fai"}
    assert summary["policies"]["oracle"]["final_regret"]["mean"] == 0.0
    for p in summary["policies"].values():
        r = p["final_regret"]
        assert r["band90"][0] <= r["mean"] <= r["band90"][1] and r["ci90"][0] <= r["mean"] <= r["ci90"][1]
        assert "mean" in p["final_suboptimality"]
    lines = (out / "curves.csv").read_text().splitlines()
    assert lines[0].startswith("policy,step,regret_mean") and len(lines) == 1 + 4 * 12
    assert (out / "regret.png").stat().st_size > 10_000
    table = capsys.readouterr().out
    assert "final regret" in table and "omgpt" in table


def test_evaluate_without_checkpoint_on_pricing(tmp_path):
    out = tmp_path / "pricing"
    assert (
        cli_main(
            [
                "evaluate",
                "--task",
                "pricing",
                "--policies",
                "oracle,ilse,cils",
                "--runs",
                "4",
                "--horizon",
                "10",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policies"]["oracle"]["final_regret"]["mean"] == 0.0
    assert summary["policies"]["ilse"]["final_regret"]["mean"] > 0


def test_evaluate_records_the_batch_size_and_device_that_name_its_draws(tmp_path):
    """docs/protocol.md: each batch draws its noise from its own generator, so a seed played at another
    batch size is another sample (same environments, other noise); summary.json records both."""

    def final(batch, name):
        out = tmp_path / name
        assert (
            cli_main(
                [
                    "evaluate",
                    "--task",
                    "pricing",
                    "--policies",
                    "ilse",
                    "--runs",
                    "4",
                    "--horizon",
                    "10",
                    "--batch_size",
                    str(batch),
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
            == 0
        )
        summary = json.loads((out / "summary.json").read_text())
        assert summary["batch_size"] == batch and summary["device"] == "cpu"
        return summary["policies"]["ilse"]["final_regret"]["mean"]

    assert final(2, "a") == final(2, "b")  # the same seed, batch size and device: the same numbers
    assert final(2, "a") != final(4, "c")  # another batch size: other noise


@pytest.mark.parametrize(
    "args, message",
    [
        (["evaluate", "--task", "nope", "--policies", "oracle"], "unknown task 'nope'"),
        (["evaluate", "--task", "pricing", "--policies", "oracle,bogus"], "unknown policy 'bogus'"),
        (["evaluate", "--task", "pricing", "--policies", "erm"], "does not apply to task 'pricing'"),
        (["evaluate", "--task", "pricing", "--option", "colour=3", "--policies", "oracle"], "no option 'colour'"),
        (["evaluate", "--task", "pricing", "--policies", "oracle", "--horizon", "0"], "positive integer"),
        (["evaluate", "--task", "pricing", "--policies", "omgpt"], "needs --ckpt"),
        (["evaluate", "--task", "pricing", "--policies", "omgpt", "--ckpt", "/no/such.ckpt"], "checkpoint not found"),
        (["fit", "--model.task", "nope"], "unknown task 'nope'"),
        (["fit", "--model.horizn", "5"], "horizn"),
        (["fit", "--config", "/no/such.yaml"], "such.yaml"),
        (["frobnicate"], "unknown command"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(args, message, capsys, tmp_path):
    assert cli_main(args + (["--out", str(tmp_path / "x")] if args[0] == "evaluate" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("omgpt: error:") and "\n" not in err and "Traceback" not in err, err
    assert message in err, err


def test_mismatched_and_corrupt_checkpoints_are_rejected(trained, tmp_path, capsys):
    out = tmp_path / "e"
    assert (
        cli_main(["evaluate", "--task", "pricing", "--policies", "omgpt", "--ckpt", str(trained), "--out", str(out)])
        == 2
    )
    assert "trained on task 'newsvendor', not 'pricing'" in capsys.readouterr().err
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(trained.read_bytes()[:1000])
    assert cli_main(["evaluate", "--policies", "omgpt", "--ckpt", str(broken), "--out", str(out)]) == 2
    assert "cannot read checkpoint" in capsys.readouterr().err
    assert not out.exists(), "a failed evaluation writes nothing"


@pytest.mark.slow
def test_python_dash_m_and_console_script_agree():
    for cmd in ([sys.executable, "-m", "omgpt", "--help"], [str(Path(sys.executable).parent / "omgpt"), "--help"]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "evaluate" in done.stdout and "demo" in done.stdout


def typed_command(
    name: Optional[str] = None,
    batch_size: PositiveInt = 50,
    no_progress: bool = False,
    option: Optional[list[str]] = None,
):
    """A command: a typed function whose signature and docstring jsonargparse turns into its parser.

    Args:
        name: a positional
        batch_size: a checked integer
        no_progress: a flag
        option: a repeatable option
    """


def test_commands_are_typed_functions_behind_jsonargparse_with_the_command_lines_spelling():
    got = parse(
        typed_command,
        "omgpt x",
        ["--batch-size", "3", "--no-progress", "--option", "a=1", "--option", "b=2", "n"],
        positional=("name",),
    )
    assert got == {"name": "n", "batch_size": 3, "no_progress": True, "option": ["a=1", "b=2"]}
    assert parse(typed_command, "omgpt x", ["--batch_size=4", "--no_progress", "false"])["batch_size"] == 4
    assert parse(typed_command, "omgpt x", [])["no_progress"] is False
    for argv, message in (
        (["--batch-size", "0"], "omgpt x: --batch-size: must be a positive integer"),
        (["--frob"], "omgpt x: unrecognized arguments: --frob"),
    ):
        with pytest.raises(OMGPTError) as e:
            parse(typed_command, "omgpt x", argv)
        assert str(e.value).startswith(message) and "\n" not in str(e.value)


@flags(list_all="list")
def flagged_command(list_all: bool = False, jobs: PositiveInt = 1):
    """A command whose parameter would shadow a builtin under its flag's name.

    Args:
        list_all: list everything
        jobs: a checked integer
    """


def test_a_parameter_keeps_its_flag_under_another_name(capsys):
    """``@flags``: ``--list`` sets ``list_all`` (as ``omgpt experiment --list`` sets ``list_experiments``);
    the parameter's own name is no option, and ``--help`` shows the flag with the parameter's help."""
    assert parse(flagged_command, "omgpt x", ["--list", "--jobs", "2"]) == {"list_all": True, "jobs": 2}
    assert parse(flagged_command, "omgpt x", ["--list", "false"])["list_all"] is False
    assert parse(flagged_command, "omgpt x", [])["list_all"] is False
    with pytest.raises(OMGPTError, match="unrecognized arguments: --list_all"):
        parse(flagged_command, "omgpt x", ["--list_all"])
    with pytest.raises(SystemExit) as done:  # jsonargparse exits after printing a command's help
        cli_main(["experiment", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert (
        "--list {true,false}   list the experiments and exit" in out
        and "--all {true,false}" in out
        and "_experiments" not in out
    )


def test_help_lists_every_command_with_its_functions_summary(capsys):
    assert cli_main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in (
        "fit",
        "validate",
        "evaluate",
        "demand-prediction",
        "demo",
        "experiment",
        "bench",
        "probe",
        "tsne",
        "tsne-training",
        "manipulate",
    ):
        assert f"\n  {name:<10} " in out, name
    assert "Roll out OMGPT and benchmarks on test environments" in out
    assert "demand predictions against ridge regression" in out and "several checkpoints of one training" in out


@pytest.mark.parametrize(
    "argv, new",
    [
        (["evaluate", "--demand-prediction", "--ckpt", "x.ckpt"], "omgpt demand-prediction"),
        (["evaluate", "--ckpt", "x.ckpt", "--demand_prediction=true"], "omgpt demand-prediction"),
        (["tsne", "--mode", "training", "--ckpt", "a.ckpt", "--ckpt", "b.ckpt"], "omgpt tsne-training"),
        (["tsne", "--mode=layers", "--ckpt", "a.ckpt"], "omgpt tsne-training"),
    ],
)
def test_the_second_commands_once_behind_flags_are_named_by_their_old_spelling(argv, new, tmp_path, capsys):
    """``omgpt evaluate --demand-prediction`` and ``omgpt tsne --mode training`` became commands of their
    own: the old spelling is one line naming the new command, before any work."""
    assert cli_main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("omgpt: error:") and new in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_new_network_setting_is_one_field_of_network_config(tmp_path):
    """Issue 35's one-place change: a copy of the package whose NetworkConfig has one more field (and
    nothing else changed) takes it on the command line, trains a step with it, writes it into the
    checkpoint, and loads it back into the network's config -- the CLI, the module, the checkpoint and
    load_model all read the network's settings from that one class."""
    code = tmp_path / "src"
    shutil.copytree(ROOT / "omgpt", code / "omgpt", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("callbacks", "datamodules", "analysis"):  # where the install maps them (pyproject.toml)
        (code / "omgpt" / folder).symlink_to(ROOT / folder)
    (code / "configs").symlink_to(ROOT / "configs")
    model_py = code / "omgpt" / "model.py"
    field = '    pos_encoding: str = "learned"\n'
    assert model_py.read_text().count(field) == 1
    model_py.write_text(model_py.read_text().replace(field, field + "    ff_gate: int = 0  # the new setting\n"))
    fit = [*fit_args(tmp_path), "--model.network.ff_gate", "3", "--trainer.max_steps", "1"]
    check = (
        "import sys, torch; from pathlib import Path; from omgpt import load_model; from omgpt.commands.cli import cli_main\n"
        f"assert cli_main({fit!r}) == 0\n"
        f"[ckpt] = Path({str(tmp_path / 'runs')!r}).rglob('last.ckpt')\n"
        "assert torch.load(ckpt, weights_only=True)['hyper_parameters']['network']['ff_gate'] == 3\n"
        "model, _, hparams = load_model(ckpt)\n"
        "assert model.cfg.ff_gate == 3 == hparams['network']['ff_gate']\n"
        "print('trained and loaded with ff_gate', model.cfg.ff_gate)\n"
    )
    run = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(code)},
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0 and "trained and loaded with ff_gate 3" in run.stdout, run.stderr[-3000:]
    unknown = subprocess.run([sys.executable, "-m", "omgpt", *fit_args(tmp_path / "x"), "--model.network.ff_gate", "3"],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert unknown.returncode == 2 and "ff_gate" in unknown.stderr  # the installed package has no such setting
