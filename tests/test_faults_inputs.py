"""Degenerate and hostile inputs (issue 25), each found by a probe and each one line ``omgpt: error:``
and exit code 2 (or, for Ctrl-C, ``omgpt: interrupted`` and 130), with nothing written before lost:

* size-like task options (``dim=0``) are refused by the task, not played into meaningless numbers;
* a context window longer than the training horizon, or a ``--window`` no policy reads;
* work beyond the process's address-space limit (``ulimit -v``), not only beyond free RAM;
* Ctrl-C during a command, and a disk that fills while a fit saves a checkpoint;
* two live fits in one run folder; temporary files a killed process left (cleaned), a live one's (kept);
* malformed or binary config files: experiment configs, ``--config``, ``--fit-config``, tuned constants;
* every output records the code version behind it.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from omgpt import tuning
from omgpt.commands.cli import cli_main
from omgpt.files import atomic_write
from omgpt.locks import lock_file
from omgpt.records import RecordError
from omgpt.resources import code_version
from tests.test_safety import fit_args, one_line_error

ROOT = Path(__file__).resolve().parents[1]
BINARY = bytes(range(256)) * 8  # not UTF-8: what a config path pointing at a checkpoint or an image holds


def omgpt_process(*args: str, **popen) -> subprocess.Popen:
    """``python -m omgpt ARGS`` as a user runs it from a terminal (the real entry point, its exit code and
    stderr). SIGINT is restored to its default in the child: a test suite started in the background
    (``nohup ... &``) inherits SIGINT ignored, which Python then keeps, and Ctrl-C would be lost."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    popen.setdefault("preexec_fn", lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return subprocess.Popen(
        [sys.executable, "-m", "omgpt", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def wait_for(found, proc: subprocess.Popen | None = None, what: str = "", timeout: float = 180):
    """Poll ``found()`` until it returns something truthy (the process, if given, still running)."""
    deadline = time.monotonic() + timeout
    while not (result := found()):
        assert proc is None or proc.poll() is None, f"ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.05)
    return result


def staging(parent: Path, name: str) -> list[Path]:
    """The temporary folders an output folder ``parent/name`` is built in."""
    return sorted(parent.glob(f".{name}.*"))


# --------------------------------------------------------------------------------------------------
# 1. Size-like task options
@pytest.mark.parametrize("task", ["newsvendor", "newsvendor-nonperishable", "pricing"])
def test_a_zero_dimension_is_refused_by_the_task(task, tmp_path, capsys):
    """``dim=0`` ran: the newsvendor reported a regret of exactly 0.00 for every policy, and pricing
    failed on a NaN optimal action far from the option that caused it."""
    out = tmp_path / "eval"
    assert cli_main(["evaluate", "--task", task, "--option", "dim=0", "--policies", "oracle", "--runs", "2", "--horizon", "3",
                     "--out", str(out), "--no-progress"]) == 2  # fmt: skip
    assert "dim must be a positive integer, got 0" in one_line_error(capsys)
    assert not out.exists()


# --------------------------------------------------------------------------------------------------
# 2. Context windows
def test_a_window_longer_than_the_training_horizon_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    assert cli_main(fit_args(tmp_path / "runs", "--model.window", "20")) == 2  # fit_args: horizon 12
    assert "model.window (20) must not exceed model.horizon (12)" in one_line_error(capsys)
    assert not (tmp_path / "runs").exists()


def test_a_window_without_the_omgpt_policy_is_refused_not_ignored(tmp_path, capsys):
    out = tmp_path / "eval"
    assert cli_main(["evaluate", "--task", "newsvendor", "--policies", "oracle,erm", "--window", "5", "--runs", "2",
                     "--horizon", "8", "--out", str(out)]) == 2  # fmt: skip
    assert "--window applies to the omgpt policy only" in one_line_error(capsys)
    assert not out.exists()


# --------------------------------------------------------------------------------------------------
# 3. Memory under a process limit
@pytest.mark.slow
def test_work_beyond_the_address_space_limit_is_refused_up_front(tmp_path):
    """Under ``ulimit -v 4194304`` (4 GiB) a million newsvendor runs -- about 8 GiB of histories, less
    than the RAM of most machines -- ran until the allocation failed; now refused before any work."""

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    out = tmp_path / "eval"
    proc = omgpt_process("evaluate", "--task", "newsvendor", "--policies", "oracle", "--runs", "1000000", "--out", str(out),
                         "--no-progress", preexec_fn=limited)  # fmt: skip
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "of memory" in lines[0], err[-2000:]
    assert not out.exists()


# --------------------------------------------------------------------------------------------------
# 4. Ctrl-C
@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_during_evaluate_is_one_line_exit_130_and_leaves_nothing(tmp_path, jobs):
    out = tmp_path / "eval"
    proc = omgpt_process(
        "evaluate",
        "--task",
        "newsvendor",
        "--policies",
        "oracle,erm",
        "--runs",
        "20000",
        "--out",
        str(out),
        "--no-progress",
        "--jobs",
        jobs,
    )
    try:
        wait_for(lambda: staging(tmp_path, "eval"), proc, "the output folder's staging (the work's start)")
        if jobs != "1":
            time.sleep(3)  # the workers playing (the parent alone gets the signal; it ends them)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "omgpt: interrupted", err[-2000:]
    assert not out.exists() and not staging(tmp_path, "eval")


class Interrupt(Callback):
    """Ctrl-C at the end of the first training step (as SIGINT raises it in the main thread)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        raise KeyboardInterrupt


@pytest.mark.slow
def test_ctrl_c_during_fit_is_one_line_exit_130_and_frees_the_run_folder(tmp_path, capsys, monkeypatch):
    """Lightning catches the interrupt, shuts the run down and calls ``sys.exit(1)``; the CLI says
    what happened instead."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    handler = signal.getsignal(signal.SIGINT)
    try:
        code = cli_main(fit_args(tmp_path / "runs", "--trainer.callbacks+=tests.test_faults_inputs.Interrupt"))
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores SIGINT from its interrupt on
    assert code == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "omgpt: interrupted", err[-2000:]
    assert not list((tmp_path / "runs").rglob("*.lock"))


# --------------------------------------------------------------------------------------------------
# 5. One live fit per run folder
@pytest.mark.slow
def test_a_fit_refuses_a_run_folder_a_live_fit_holds_and_takes_it_once_that_fit_is_killed(
    tmp_path, capsys, monkeypatch
):
    """Two fits with the same explicit version interleaved one metrics.csv and overwrote each other's
    checkpoints. The holder here is a real fit, stalled at step 1 and then SIGKILLed (its lock file
    stays behind: it blocks no one)."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    runs, stall = tmp_path / "runs", tmp_path / "stall"
    version = ("--trainer.logger.init_args.version", "run")
    holder = omgpt_process(*fit_args(runs, *version, "--trainer.callbacks+=tests.ddp_probe.Stall", "--trainer.callbacks.out", str(stall),
                                     "--trainer.callbacks.at_step", "1"), start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: (stall / "stalled0").exists(), holder, "the first fit's step 1")
        metrics = (runs / "omgpt/run/metrics.csv").read_bytes() if (runs / "omgpt/run/metrics.csv").exists() else None
        assert cli_main(fit_args(runs, *version, "--trainer.max_steps", "1")) == 2
        line = one_line_error(capsys)
        assert (
            f"in use by another live process (pid {holder.pid})" in line
            and "--trainer.logger.init_args.version" in line
        ), line
        after = (runs / "omgpt/run/metrics.csv").read_bytes() if (runs / "omgpt/run/metrics.csv").exists() else None
        assert after == metrics
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.communicate(timeout=30)
    assert lock_file(runs / "omgpt/run").exists()  # what the killed fit left
    # the folder holds the killed run now: a fresh fit is refused, a resume takes it
    assert cli_main(fit_args(runs, *version, "--trainer.max_steps", "1")) == 2
    assert "already holds a run" in one_line_error(capsys)
    assert cli_main(fit_args(runs, *version, "--trainer.max_steps", "1", "--ckpt_path", "last")) == 0
    assert not lock_file(runs / "omgpt/run").exists()


# --------------------------------------------------------------------------------------------------
# 6. Temporary files of killed processes
def write_and_hang(target: Path, ready: Path) -> None:
    """A writer killed mid-write: half of the bytes in its temporary file, then it hangs."""

    def half(f):
        f.write(b"half of a new state")
        f.flush()
        ready.write_text("writing")
        time.sleep(600)

    atomic_write(target, half)


def test_a_killed_writers_temporary_file_is_removed_and_a_live_writers_kept(tmp_path):
    target, fork = tmp_path / "last.ckpt", multiprocessing.get_context("fork")
    target.write_bytes(b"the last good state")
    writers = []
    for name in ("killed", "live"):
        ready = tmp_path / f"{name}.ready"
        writer = fork.Process(target=write_and_hang, args=(target, ready))
        writer.start()
        writers.append(writer)
        wait_for(ready.exists, what=f"the {name} writer's bytes")
    killed, live = writers
    try:
        killed.kill()
        killed.join()  # reaped, as its parent or init would: its pid is gone
        temps = sorted(p.name for p in tmp_path.glob(".last.ckpt.*.tmp"))
        assert len(temps) == 2
        atomic_write(target, lambda f: f.write(b"a new state"))  # the next save (a resumed fit's)
        assert target.read_bytes() == b"a new state"
        (kept,) = [p.name for p in tmp_path.glob(".last.ckpt.*.tmp")]
        assert kept in temps and f"-{live.pid}." in kept, "the live writer's file was removed"
    finally:
        live.kill()
        live.join()
    atomic_write(target, lambda f: f.write(b"a newer state"))
    assert not list(tmp_path.glob(".last.ckpt.*.tmp"))


@pytest.mark.slow
def test_a_killed_evaluations_staging_folder_is_removed_by_the_next_run(tmp_path):
    out = tmp_path / "eval"
    proc = omgpt_process(
        "evaluate",
        "--task",
        "newsvendor",
        "--policies",
        "oracle",
        "--runs",
        "20000",
        "--out",
        str(out),
        "--no-progress",
    )
    try:
        (stage,) = wait_for(lambda: staging(tmp_path, "eval"), proc, "the output folder's staging")
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert stage.exists() and not out.exists()
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval"]


# --------------------------------------------------------------------------------------------------
# 7. A full disk while a fit saves a checkpoint
@pytest.mark.slow
@pytest.mark.parametrize("error", [
    RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/3: file write failed"),
    OSError(errno.ENOSPC, "No space left on device"),
], ids=["torch", "os"])  # fmt: skip
def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_keeps_last_ckpt(error, tmp_path, capsys, monkeypatch):
    """A checkpoint after every step; the second save finds the disk full after half of its bytes."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    every_step = tmp_path / "ft.yaml"
    every_step.write_text(
        (ROOT / "configs/trainer/fault_tolerant.yaml")
        .read_text()
        .replace("every_n_train_steps: 500", "every_n_train_steps: 1")
    )
    save, saves = torch.save, []

    def filling_the_disk(obj, f, *args, **kwargs):
        saves.append(f)
        if len(saves) == 1:
            return save(obj, f, *args, **kwargs)
        f.write(b"the first bytes")
        raise error

    monkeypatch.setattr(torch, "save", filling_the_disk)
    assert cli_main(fit_args(tmp_path / "runs", "--config", str(every_step))) == 2
    line = one_line_error(capsys)
    assert "cannot save checkpoint" in line and "last.ckpt" in line and "unchanged" in line, line
    monkeypatch.undo()
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 1
    assert not [p.name for p in (tmp_path / "runs").rglob(".*")]


# --------------------------------------------------------------------------------------------------
# 8. Config files
def test_experiment_list_lists_then_names_the_bad_file_in_one_line(tmp_path, capsys, monkeypatch):
    from omgpt.commands.experiment import config

    monkeypatch.setattr(config, "EXPERIMENTS", tmp_path)
    (tmp_path / "fine.yaml").write_text("title: A fine experiment\nmodels: {}\npanels: []\n")
    (tmp_path / "broken.yaml").write_text("title: [unclosed\n")
    assert cli_main(["experiment", "--list"]) == 2
    captured = capsys.readouterr()
    assert captured.out.split() == ["fine", "A", "fine", "experiment"]
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("omgpt: error:") and "broken.yaml: not valid YAML" in lines[0], lines
    with pytest.raises(RecordError, match="broken.yaml"):  # what --all reads: it refuses, never skips one
        config.available()


def test_a_binary_config_file_is_one_line_for_fit_and_experiment(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    binary = tmp_path / "model.yaml"
    binary.write_bytes(BINARY)
    assert cli_main(fit_args(tmp_path / "runs", "--config", str(binary))) == 2
    assert f"{binary}: not a text config file" in one_line_error(capsys)
    assert not (tmp_path / "runs").exists()
    # refused before the first model's fit starts (each fit process found it, after the others trained)
    args = [
        "experiment",
        "main-results",
        "--fit-config",
        str(binary),
        "--models-dir",
        str(tmp_path / "models"),
        "--out",
        str(tmp_path / "out"),
    ]
    assert cli_main(args) == 2
    assert f"{binary}: not a text --fit-config file" in one_line_error(capsys)
    assert not (tmp_path / "models").exists() and not (tmp_path / "out").exists()


def test_a_damaged_tuned_constants_file_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(tuning.FOLDER_VARIABLE, str(tmp_path))
    (tmp_path / "mab-T9.json").write_text('{"setting": {}, "policies": {"ucb": {"constants": {"expl')  # cut off
    out = tmp_path / "eval"
    assert (
        cli_main(
            ["evaluate", "--task", "mab", "--policies", "ucb-tuned", "--runs", "2", "--horizon", "9", "--out", str(out)]
        )
        == 2
    )
    line = one_line_error(capsys)
    assert "mab-T9.json: not valid JSON" in line and "the tuned-constants file is damaged" in line, line
    assert not out.exists()


# --------------------------------------------------------------------------------------------------
# 9. Every output names the code behind it
def test_a_tuning_records_the_code_version_of_each_policys_entry(tmp_path, monkeypatch):
    from omgpt.commands.tune import run_tuning
    from omgpt.policies.bandit import UCB

    monkeypatch.setattr(tuning, "TUNED", tmp_path)
    monkeypatch.setattr(UCB, "tunable", {"explore": (0.5,)})
    content = run_tuning("mab", {"n_arms": 3}, ["ucb"], horizon=4, runs=2, seed=10_500, log=lambda line: None)
    assert content["setting"] == {"task": "mab", "task_options": {"n_arms": 3}, "horizon": 4}
    assert content["policies"]["ucb"]["code_version"] == code_version()
    assert tuning.read_tuned(tmp_path / "mab-n_arms=3-T4.json")["policies"]["ucb"]["code_version"] == code_version()


def test_the_demand_prediction_report_records_the_code_version(tmp_path):
    """``omgpt demand-prediction`` (as ``omgpt evaluate``'s summary.json always did); an untrained
    pricing model with an observation head is enough to write the report."""
    from tests.test_agent import tiny_checkpoint

    ckpt = tiny_checkpoint(tmp_path / "obs.ckpt", task="pricing", network={"obs_head": True})
    out = tmp_path / "demand"
    assert (
        cli_main(
            [
                "demand-prediction",
                "--ckpt",
                str(ckpt),
                "--runs",
                "2",
                "--horizon",
                "4",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    report = json.loads((out / "demand_prediction.json").read_text())
    assert report["code_version"] == code_version() and report["task"] == "pricing" and report["task_options"] == {}
    # a command of its own, with its own files: omgpt evaluate does not replace its folder
    assert (
        cli_main(
            [
                "evaluate",
                "--task",
                "pricing",
                "--policies",
                "oracle",
                "--runs",
                "2",
                "--horizon",
                "4",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 2
    )
    assert json.loads((out / "demand_prediction.json").read_text()) == report
