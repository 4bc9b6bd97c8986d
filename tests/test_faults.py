"""The promises of docs/cli.md ("Faults", "Errors") under faults and bad input, one test per kind of fault (issue 15):

* checkpoints: every path a fit resumes from (``--ckpt_path`` files and the ``last`` alias) reads
  with ``weights_only=True`` even where torch's default would not; a malicious, truncated, foreign or
  mis-shaped checkpoint, or one whose settings conflict with the run's, is one line and exit 2;
* the NaN guard: a finite loss with a non-finite update never reaches the weights or a checkpoint,
  and a diverged checkpoint is never evaluated into NaN numbers;
* files: checkpoints and outputs are written beside their target (never through the system temp
  folder), atomically, and an output folder is written as a whole -- concurrent evaluations into
  one ``--out`` each install a complete folder;
* values: every bad value of the probe that found the defects ends with one line ``omgpt: error:``
  and exit code 2, and leaves what was written before as it was -- also for random argument values
  (hypothesis);
* results that would be silently wrong are refused or labelled: NaN options, a one-run CI, a horizon
  or run count that cannot fit in memory.

(SIGKILL at epoch boundaries and under DDP: tests/test_resume.py and tests/test_ddp.py.)
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omgpt.commands.cli import cli_main
from omgpt.files import atomic_write, write_json
from tests.test_safety import fit_args, last_ckpt, one_line_error, snapshot, trained  # noqa: F401 (trained: a fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ckpt(trained) -> Path:
    """The last.ckpt of test_safety's finished tiny newsvendor fit (2 layers, 16 dims, horizon 12)."""
    return last_ckpt(trained)


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """An evaluation's output folder, written before the bad commands that point at it."""
    out = tmp_path_factory.mktemp("earlier") / "eval"
    assert (
        cli_main(
            [
                "evaluate",
                "--task",
                "newsvendor",
                "--policies",
                "oracle,erm",
                "--runs",
                "3",
                "--horizon",
                "4",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    return out


def edited(ckpt: Path, path: Path, edit) -> Path:
    """A copy of checkpoint ``ckpt`` with ``edit(dict)`` applied, saved at ``path``."""
    data = torch.load(ckpt, map_location="cpu", weights_only=True)
    edit(data)
    torch.save(data, path)
    return path


def assert_kept(before: dict[str, str], folder: Path) -> None:
    """Every file of the ``before`` snapshot is still there, byte for byte (new files may appear)."""
    after = snapshot(folder)
    assert {k: after.get(k) for k in before} == before, f"{folder} was changed"


class Payload:
    """Unpickling this creates ``marker``: what a malicious checkpoint would do instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


# --------------------------------------------------------------------------------------------------
# Checkpoints
@pytest.mark.parametrize("ckpt_path", ["last", "explicit"])
def test_a_malicious_last_ckpt_never_runs_whatever_torchs_default(ckpt_path, tmp_path, capsys, monkeypatch):
    """torch before 2.6 unpickles anything by default: simulated with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD.
    The payload sits at the last.ckpt that ``--ckpt_path last`` resolves to (the run folder's)."""
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    last = tmp_path / "runs/omgpt/run/checkpoints/last.ckpt"
    last.parent.mkdir(parents=True)
    torch.save({"state_dict": {}, "payload": Payload(tmp_path / "pwned")}, last)
    before = last.read_bytes()
    args = fit_args(
        tmp_path / "runs",
        "--trainer.logger.init_args.version",
        "run",
        "--ckpt_path",
        "last" if ckpt_path == "last" else str(last),
    )
    assert cli_main(args) == 2
    assert "refusing to load checkpoint" in one_line_error(capsys)
    assert not (tmp_path / "pwned").exists(), "the checkpoint ran code"
    assert last.read_bytes() == before


def test_a_truncated_last_ckpt_is_one_line_for_the_last_alias(ckpt, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    last = tmp_path / "runs/omgpt/run/checkpoints/last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 3])
    assert (
        cli_main(fit_args(tmp_path / "runs", "--trainer.logger.init_args.version", "run", "--ckpt_path", "last")) == 2
    )
    assert "cannot read checkpoint" in one_line_error(capsys)


def widen_a_matrix(ckpt: dict) -> None:
    name = next(k for k, v in ckpt["state_dict"].items() if v.dim() == 2)
    ckpt["state_dict"][name] = torch.zeros(3, 5)


FOREIGN = {
    "extra hyper-parameter": (
        lambda c: c["hyper_parameters"].update(colour=3),
        "hyper-parameters OMGPTModule does not take: colour",
    ),
    "wrongly shaped tensor": (widen_a_matrix, "weights do not fit the model its settings describe"),
}


@pytest.mark.parametrize("defect", list(FOREIGN))
def test_foreign_checkpoints_are_one_line_for_evaluate_and_fit(
    defect, trained, ckpt, earlier, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    edit, message = FOREIGN[defect]
    bad = edited(ckpt, tmp_path / "x.ckpt", edit)
    before = snapshot(earlier)
    assert (
        cli_main(
            [
                "evaluate",
                "--policies",
                "omgpt,oracle",
                "--ckpt",
                str(bad),
                "--runs",
                "2",
                "--horizon",
                "3",
                "--out",
                str(earlier),
            ]
        )
        == 2
    )
    assert message in one_line_error(capsys)
    assert snapshot(earlier) == before
    run_before = snapshot(trained)
    assert cli_main(fit_args(trained, "--ckpt_path", str(bad))) == 2
    assert message in one_line_error(capsys)
    assert_kept(run_before, trained)


def test_a_resumed_fit_refuses_settings_that_conflict_with_the_checkpoint(ckpt, tmp_path, capsys, monkeypatch):
    """LightningCLI would silently replace --model.network.n_embd 32 by the checkpoint's 16."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    assert cli_main(fit_args(tmp_path / "runs", "--ckpt_path", str(ckpt), "--model.network.n_embd", "32")) == 2
    assert "model.network.n_embd=16 (this run: 32)" in one_line_error(capsys)
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------------------------------
# The NaN guard
def test_a_finite_loss_with_a_non_finite_update_never_reaches_the_weights_or_a_checkpoint(
    tmp_path, capsys, monkeypatch
):
    """At --model.optim.lr 1e5 the gradients overflow while the loss is still finite (measured: step 2).
    With a checkpoint after every step, every checkpoint on disk holds finite weights and last.ckpt is
    the state before the refused update."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    every_step = tmp_path / "ft.yaml"
    every_step.write_text(
        (ROOT / "configs/trainer/fault_tolerant.yaml")
        .read_text()
        .replace("every_n_train_steps: 500", "every_n_train_steps: 1")
    )
    # no warm-up and no clipping (the paper scale's base.yaml has both): the raw update is what is tested
    assert (
        cli_main(
            fit_args(
                tmp_path / "runs",
                "--config",
                str(every_step),
                "--model.optim.lr",
                "1e5",
                "--model.optim.warmup_steps",
                "0",
                "--trainer.gradient_clip_val",
                "null",
            )
        )
        == 2
    )
    line = one_line_error(capsys)
    stopped = re.search(r"non-finite (gradient|training loss|weights after the update) at step (\d+)", line)
    assert stopped and "training stopped" in line, line
    ckpts = sorted((tmp_path / "runs").rglob("*.ckpt"))
    assert ckpts
    for path in ckpts:
        state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
        assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point()), (
            f"{path.name} holds non-finite weights"
        )
    (last,) = [p for p in ckpts if p.name == "last.ckpt"]
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == int(stopped.group(2))


def test_a_diverged_checkpoint_is_refused_not_evaluated_into_nan(ckpt, tmp_path, capsys):
    bad = edited(
        ckpt,
        tmp_path / "nan.ckpt",
        lambda c: next(v for v in c["state_dict"].values() if v.is_floating_point()).fill_(float("nan")),
    )
    out = tmp_path / "eval"
    assert (
        cli_main(
            [
                "evaluate",
                "--policies",
                "omgpt,oracle",
                "--ckpt",
                str(bad),
                "--runs",
                "2",
                "--horizon",
                "3",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "non-finite weights" in one_line_error(capsys)
    assert not out.exists()


def test_json_outputs_are_valid_json_even_with_non_finite_numbers(tmp_path):
    path = write_json({"a": float("nan"), "b": [1.0, float("inf")], "c": torch.tensor(2.5)}, tmp_path / "x.json")
    strict = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert strict == {"a": None, "b": [1.0, None], "c": 2.5}


# --------------------------------------------------------------------------------------------------
# Files
def test_checkpoints_and_outputs_are_written_beside_their_target_not_in_the_system_temp_folder(tmp_path, monkeypatch):
    """Lightning wrote last.ckpt to a temporary file in the system temp folder and moved it: across
    filesystems that is a copy, and a kill mid-copy destroyed the last good checkpoint. With no usable
    temp folder at all, a fit with step checkpoints and an evaluation still write everything."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-folder"))
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    args = fit_args(
        tmp_path / "runs", "--config", str(ROOT / "configs/trainer/fault_tolerant.yaml"), "--trainer.max_steps", "2"
    )
    assert cli_main(args) == 0
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 2
    out = tmp_path / "eval"
    assert (
        cli_main(
            [
                "evaluate",
                "--task",
                "newsvendor",
                "--policies",
                "oracle",
                "--runs",
                "2",
                "--horizon",
                "3",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == ["curves.csv", "regret.png", "summary.json"]
    leftovers = [p.name for p in tmp_path.rglob("*") if p.name.startswith(".")]
    assert not leftovers, leftovers


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "last.ckpt"
    target.write_bytes(b"the last good state")

    def killed_midway(f):
        f.write(b"half of a new state")
        raise KeyboardInterrupt  # as a kill would, after part of the bytes

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, killed_midway)
    assert target.read_bytes() == b"the last good state"
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def evaluate_in_child(args: list[str], err: Path) -> None:
    with err.open("w") as f, contextlib.redirect_stderr(f), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(args)
    os._exit(code)


@pytest.mark.slow
def test_concurrent_evaluations_into_one_out_each_install_a_whole_folder(tmp_path):
    """Two evaluations into the same --out, started together (forked, so they reach their writes
    together; four rounds): both succeed and the folder is one run's -- summary.json and curves.csv
    agree -- with nothing left beside it."""
    out, fork = tmp_path / "runs" / "eval", multiprocessing.get_context("fork")
    for round_ in range(4):
        children = []
        for k in (0, 1):
            args = ["evaluate", "--task", "newsvendor", "--policies", "oracle,erm", "--runs", "8", "--horizon", "20",
                    "--seed", str(10 + 2 * round_ + k), "--out", str(out), "--no-progress"]  # fmt: skip
            err = tmp_path / f"stderr{k}"
            children.append((fork.Process(target=evaluate_in_child, args=(args, err)), err))
        for child, _ in children:
            child.start()
        for child, err in children:
            child.join(timeout=300)
            assert child.exitcode == 0, err.read_text()[-2000:]
        summary = json.loads((out / "summary.json").read_text())
        rows = [line.split(",") for line in (out / "curves.csv").read_text().splitlines()[1:]]
        last = {r[0]: float(r[2]) for r in rows if r[1] == "20"}  # regret_mean at the last step
        assert len(rows) == 2 * 20 and set(last) == set(summary["policies"])
        for name, p in summary["policies"].items():
            assert last[name] == pytest.approx(p["final_regret"]["mean"], rel=1e-5, abs=1e-6), "files of two runs"
        assert [p.name for p in out.parent.iterdir()] == ["eval"], "a temporary folder was left"


def test_an_out_holding_other_files_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("not an evaluation's")
    assert (
        cli_main(
            [
                "evaluate",
                "--task",
                "newsvendor",
                "--policies",
                "oracle",
                "--runs",
                "2",
                "--horizon",
                "3",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "holds files it does not write (notes.txt)" in one_line_error(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


# --------------------------------------------------------------------------------------------------
# Values: every bad input of the probe, one line and exit 2, nothing written before damaged.
BAD_INPUTS = {
    "negative seed (evaluate)": (["evaluate", "--task", "pricing", "--policies", "oracle", "--seed", "-1"], "--seed"),
    "negative seed (demo)": (["demo", "--seed", "-1", "--max-steps", "1"], "--seed"),
    "negative seed (experiment)": (["experiment", "main-results", "--seed", "-1"], "--seed"),
    "NaN option": (
        ["evaluate", "--task", "pricing", "--policies", "oracle", "--option", "noise_std=nan"],
        "'noise_std' must be a finite number",
    ),
    "infinite option": (
        ["evaluate", "--task", "pricing", "--policies", "oracle", "--option", "noise_std=inf"],
        "'noise_std' must be a finite number",
    ),
    "YAML NaN option": (
        ["evaluate", "--task", "pricing", "--policies", "oracle", "--option", "ood_shift=.nan"],
        "'ood_shift' must be a finite number",
    ),
    "text for an integer option": (
        ["evaluate", "--task", "pricing", "--policies", "oracle", "--option", "dim=abc"],
        "'dim' must be an integer",
    ),
    "negative size option": (
        ["evaluate", "--task", "pricing", "--policies", "oracle", "--option", "dim=-2"],
        "dim must be a positive integer, got -2",
    ),
    "negative noise std option": (
        ["evaluate", "--task", "mab", "--policies", "ucb", "--option", "noise_std=-1"],
        "noise_std must be a finite non-negative",
    ),
    "unknown device": (
        ["evaluate", "--task", "pricing", "--policies", "omgpt", "--ckpt", "{ckpt}", "--device", "nosuch"],
        "--device 'nosuch' is not a torch device",
    ),
    "absent CUDA device": (
        ["evaluate", "--task", "pricing", "--policies", "omgpt", "--ckpt", "{ckpt}", "--device", "cuda:99"],
        "--device cuda:99",
    ),
    "--out is a file": (
        ["evaluate", "--task", "pricing", "--policies", "oracle", "--out", "{file}"],
        "--out: must be a folder to write, not a file",
    ),
    "--out cannot be made": (
        ["evaluate", "--task", "pricing", "--policies", "oracle", "--out", "/proc/omgpt/x"],
        "--out: must be a path this process may write",
    ),
    "runs beyond memory": (
        ["evaluate", "--task", "pricing", "--policies", "oracle", "--runs", "1000000000", "--horizon", "3"],
        "of memory",
    ),
    "horizon beyond memory": (
        ["evaluate", "--task", "newsvendor", "--policies", "oracle", "--horizon", "10000000"],
        "of memory",
    ),
    "horizon beyond memory (fit)": (["FIT", "--model.horizon", "1000000000"], "of memory"),
    "omgpt test": (["test", "--config", "configs/newsvendor.yaml"], "unknown command 'test'"),
    "token sizes of another dim (probe)": (
        ["probe", "--ckpt", "{ckpt}", "--option", "dim=10", "--n-train", "8", "--n-test", "4"],
        "change the token sizes",
    ),
    "zero perplexity": (["tsne", "--ckpt", "{ckpt}", "--perplexity", "0"], "--perplexity: must be a positive number"),
    "NaN perplexity": (["tsne", "--ckpt", "{ckpt}", "--perplexity", "nan"], "--perplexity: must be a positive number"),
    "zero threads": (["bench", "--smoke", "--threads", "0"], "--threads: must be a positive integer"),
    "unwritable --json": (["bench", "--smoke", "--json", "/proc/omgpt/bench.json"], "cannot write --json"),
    "max_epochs -5": (["FIT", "--trainer.max_epochs", "-5"], "max_epochs"),
    "devices 0": (["FIT", "--trainer.devices", "0"], "devices"),
    "num_workers -1": (["FIT", "--data.num_workers", "-1"], "data.num_workers must be a non-negative integer"),
    "lr -1": (["FIT", "--model.optim.lr", "-1"], "model.optim.lr must be a positive number"),
    "lr NaN": (["FIT", "--model.optim.lr", ".nan"], "model.optim.lr must be a positive number"),
    "seed_everything -1": (["FIT", "--seed_everything", "-1"], "seed_everything must be an integer"),
    "data seed -1": (["FIT", "--data.seed", "-1"], "data.seed must be an integer"),
    "--ckpt_path best in a new process": (["FIT", "--ckpt_path", "best"], 'ckpt_path="best"'),
    "--ckpt_path hpc without one": (["FIT", "--ckpt_path", "hpc"], "no HPC checkpoint"),
}
if not torch.cuda.is_available():  # with a GPU, `--trainer.accelerator gpu` is a valid setting
    BAD_INPUTS["accelerator gpu without a GPU"] = (["FIT", "--trainer.accelerator", "gpu"], "gpu")


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_values_are_one_line_exit_2_and_leave_earlier_outputs_alone(
    case, trained, ckpt, earlier, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    monkeypatch.chdir(ROOT)
    args, message = BAD_INPUTS[case]
    (tmp_path / "file").write_text("a file")
    args = [a.format(ckpt=ckpt, file=tmp_path / "file") for a in args]
    runs = trained
    if args[0] == "FIT":
        args = fit_args(runs, *args[1:])
    elif "--out" not in args and args[0] not in ("test", "bench", "experiment", "demo"):
        args += ["--out", str(earlier)]
    elif args[0] == "demo":
        args += ["--out", str(tmp_path / "demo")]
    before, run_before = snapshot(earlier), snapshot(runs)
    assert cli_main(args) == 2
    line = one_line_error(capsys)
    assert message in line, line
    assert snapshot(earlier) == before
    assert_kept(run_before, runs)
    if args[0] == "bench":
        assert "omgpt bench (" not in capsys.readouterr().out, "found only after the run"


# --------------------------------------------------------------------------------------------------
# Results that would be silently wrong
def test_one_run_reports_no_confidence_interval(tmp_path, capsys):
    out = tmp_path / "eval"
    assert (
        cli_main(
            [
                "evaluate",
                "--task",
                "newsvendor",
                "--policies",
                "oracle,erm",
                "--runs",
                "1",
                "--horizon",
                "5",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "undefined" in table and "needs at least 2 runs" in table
    summary = json.loads((out / "summary.json").read_text())
    assert all(p["final_regret"]["ci90"] is None for p in summary["policies"].values())
    header, first = (out / "curves.csv").read_text().splitlines()[:2]
    cells = dict(zip(header.split(","), first.split(",")))
    assert cells["regret_ci05"] == cells["regret_ci95"] == "" and cells["regret_mean"] != ""


# --------------------------------------------------------------------------------------------------
# Random argument values (hypothesis): never a traceback, never damage. An example breaks at most one
# argument (about half break none), so that many get past the parser into the task options, the
# policies, the rollouts and the output folder.
BAD_NUMBERS = st.sampled_from(["-1", "0", "2.5", "nan", "inf", "-inf", ".nan", "abc", "", "1e9", "1e3", "1000000000"])
VALID_TASKS = ["newsvendor", "pricing", "mab", "linear-bandit"]
VALID = {
    "task": st.sampled_from(VALID_TASKS),
    "runs": st.integers(1, 6).map(str),
    "horizon": st.integers(1, 12).map(str),  # (long horizons: BAD_INPUTS)
    "seed": st.integers(0, 2**32 - 1).map(str),
    "device": st.just("cpu"),
}
INVALID = {
    "task": st.sampled_from(["nope", ""]),
    "runs": BAD_NUMBERS,
    "horizon": BAD_NUMBERS,
    "seed": BAD_NUMBERS,
    "device": st.sampled_from(["cuda:99", "nosuch", "meta", ""]),
    "option": st.tuples(
        st.sampled_from(
            ["dim", "noise_std", "pool_size", "ood_shift", "id_shift", "lost_sale_cost", "demand_types", "colour"]
        ),
        st.one_of(BAD_NUMBERS, st.sampled_from(["[1, 2]", "{a: 1}", "null", "[", "-0.04", "-2", "square", "true"])),
    ),
}


def numeric_options(task: str) -> dict[str, type]:
    """The task's int and float options, read off its constructor (whatever they are named)."""
    from omgpt.tasks import TASKS

    cls = TASKS[task].cls
    found = {}
    for klass in reversed(cls.__mro__[:-1]):
        for name, p in inspect.signature(klass.__init__).parameters.items():
            if type(p.default) in (int, float) and name not in TASKS[task].defaults:
                found[name] = type(p.default)
    return found


def valid_option(task: str) -> st.SearchStrategy:
    names = numeric_options(task)
    return st.sampled_from(sorted(names)).flatmap(
        lambda k: st.tuples(
            st.just(k), st.integers(1, 8).map(str) if names[k] is int else st.floats(0, 0.9, allow_nan=False).map(repr)
        )
    )


@st.composite
def evaluate_arguments(draw) -> dict:
    broken = draw(st.sampled_from([None] * 6 + list(VALID) + ["option"]))
    a = {k: draw(INVALID[k] if k == broken else VALID[k]) for k in VALID}
    good = valid_option(a["task"]) if a["task"] in VALID_TASKS else INVALID["option"]
    a["options"] = draw(st.lists(good, max_size=2)) + ([draw(INVALID["option"])] if broken == "option" else [])
    return a


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(a=evaluate_arguments(), into_earlier=st.booleans())
def test_random_argument_values_exit_0_or_2_without_traceback_or_damage(a, into_earlier, earlier, tmp_path):
    out = earlier if into_earlier else tmp_path / "fresh"
    args = ["evaluate", "--task", a["task"], "--policies", "oracle,random", "--runs", a["runs"], "--horizon", a["horizon"], "--seed", a["seed"],
            "--device", a["device"], "--out", str(out), "--no-progress", *[f"--option={k}={v}" for k, v in a["options"]]]  # fmt: skip
    before = snapshot(earlier)
    err, stdout = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
        code = cli_main(args)
    assert code in (0, 2) and "Traceback" not in err.getvalue(), (args, err.getvalue()[-2000:])
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("omgpt: error:"), (args, lines)
    else:  # a complete, valid output folder
        summary = json.loads((out / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
        assert summary["task"] == a["task"] and set(summary["policies"]) == {"oracle", "random"}
        assert sorted(p.name for p in out.iterdir()) == ["curves.csv", "regret.png", "summary.json"]
    if code == 2 or out != earlier:
        assert snapshot(earlier) == before, args
    shutil.rmtree(tmp_path / "fresh", ignore_errors=True)
