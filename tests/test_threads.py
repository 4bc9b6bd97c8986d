"""The torch-thread choice of the commands that train or evaluate (omgpt.threads): half the usable
CPUs by default, ``--threads N`` / ``OMGPT_THREADS=N`` / ``OMP_NUM_THREADS`` override it, and the
choice is printed once, on stdout (stderr holds nothing but an error's one line). Each command runs in a subprocess, so the count seen is the command's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from omgpt import threads
from omgpt.errors import OMGPTError

ROOT = Path(__file__).resolve().parents[1]
# Runs a command through the CLI's entry function, then reports the thread count it left.
PROBE = "import sys, torch; from omgpt.commands.cli import cli_main; code = cli_main(sys.argv[1:]); print('THREADS', torch.get_num_threads()); sys.exit(code)"
EVALUATE = [
    "evaluate",
    "--task",
    "newsvendor",
    "--policies",
    "oracle",
    "--runs",
    "2",
    "--horizon",
    "3",
    "--no-progress",
]


def clean_env(**env: str) -> dict[str, str]:
    """This environment without any thread setting (the suite runs with OMP_NUM_THREADS=1), plus ``env``."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", threads.ENV)
    }
    return {**base, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore", **env}


def run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(**env),
    )


def count(result: subprocess.CompletedProcess) -> int:
    assert result.returncode == 0, result.stderr[-2000:]
    return int(result.stdout.split("THREADS")[-1])


def announced(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("omgpt: ") and "torch thread" in line]


@pytest.mark.slow
def test_evaluate_uses_the_default_and_says_so_once(tmp_path):
    """Here torch is loaded before omgpt could make OpenMP wait passively: half the CPUs."""
    result = run([*EVALUATE, "--out", "out"], tmp_path)
    assert count(result) == max(1, threads.usable_cpus() // 2)
    (line,) = announced(result)
    assert "this process may use" in line and "--threads" in line


@pytest.mark.slow
def test_the_command_line_makes_openmp_wait_passively(tmp_path):
    """Set before torch loads OpenMP, for the omgpt command only; a policy the user set is kept."""
    env = clean_env()
    command = [sys.executable, "-m", "omgpt", *EVALUATE]
    result = subprocess.run(
        [*command, "--out", "a"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    cpus = threads.usable_cpus()
    (line,) = announced(result)
    assert result.returncode == 0 and line.endswith("OpenMP wait policy passive"), result.stderr[-2000:]
    assert line.startswith(f"omgpt: {cpus} torch thread")  # every usable CPU: a waiting thread sleeps
    result = subprocess.run(
        [*command, "--out", "b"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "OMP_WAIT_POLICY": "ACTIVE"},
    )
    (line,) = announced(result)
    assert result.returncode == 0 and line.endswith("OpenMP wait policy active")
    assert line.startswith(f"omgpt: {max(1, cpus // 2)} torch thread") and "does not wait passively" in line
    library = subprocess.run(
        [sys.executable, "-c", "import os, omgpt; print(os.environ.get('OMP_WAIT_POLICY'))"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert library.stdout.strip() == "None"  # importing the library changes nothing


@pytest.mark.slow
def test_threads_option_and_environment_override_the_default(tmp_path):
    result = run([*EVALUATE, "--out", "c"], tmp_path, OMGPT_THREADS="3", OMP_NUM_THREADS="2")
    assert count(result) == 3 and "from OMGPT_THREADS" in announced(result)[0]
    assert count(run([*EVALUATE, "--out", "d", "--threads=2"], tmp_path, OMGPT_THREADS="3")) == 2  # the option wins


@pytest.mark.slow
def test_a_fit_uses_the_chosen_threads_and_says_so_once(tmp_path):
    args = [
        "fit",
        "--config",
        str(ROOT / "configs/newsvendor.yaml"),
        "--config",
        str(ROOT / "configs/scale/tiny.yaml"),
        "--trainer.max_steps",
        "1",
        "--trainer.max_epochs",
        "1",
        "--model.horizon",
        "4",
        "--data.val_runs",
        "4",
        "--data.val_batch_size",
        "4",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger.init_args.save_dir",
        "runs",
        "--threads",
        "2",
    ]
    result = run(args, tmp_path)
    assert count(result) == 2
    assert len(announced(result)) == 1


@pytest.mark.slow
def test_a_bad_thread_count_is_one_line(tmp_path):
    result = run([*EVALUATE, "--out", "x"], tmp_path, OMGPT_THREADS="two")  # (a bad --threads: test_split_argv)
    assert result.returncode == 2 and not (tmp_path / "x").exists()
    assert result.stderr.strip().splitlines() == [
        "omgpt: error: OMGPT_THREADS must be a positive number of threads, got 'two'"
    ]


def test_choice_order_and_usable_cpus(monkeypatch):
    for name in ("OMP_NUM_THREADS", threads.ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "usable_cpus", lambda: 8)
    monkeypatch.setattr(threads, "_passive", False)
    assert threads.choose()[0] == 4
    monkeypatch.setattr(threads, "_passive", True)
    assert threads.choose()[0] == 8
    monkeypatch.setattr(threads, "_passive", False)
    monkeypatch.setattr(threads, "usable_cpus", lambda: 1)
    assert threads.choose()[0] == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert threads.choose()[0] == 5
    monkeypatch.setenv(threads.ENV, "6")
    assert threads.choose() == (6, f"from {threads.ENV}")
    assert threads.choose(7)[0] == 7
    with pytest.raises(OMGPTError, match="--threads"):
        threads.choose(0)


def test_usable_cpus_follow_affinity_and_cgroup_quota(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: None)
    assert threads.usable_cpus() == 4
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 1.5)  # docker --cpus 1.5
    assert threads.usable_cpus() == 2
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 16.0)
    assert threads.usable_cpus() == 4


def test_split_argv():
    assert threads.split_argv(["fit", "--threads", "2", "--config", "c.yaml"]) == (["fit", "--config", "c.yaml"], 2)
    assert threads.split_argv(["evaluate", "--threads=3"]) == (["evaluate"], 3)
    assert threads.split_argv(["demo"]) == (["demo"], None)
    for bad in (["demo", "--threads"], ["demo", "--threads", "x"], ["demo", "--threads=-1"]):
        with pytest.raises(OMGPTError, match="--threads"):
            threads.split_argv(bad)


@pytest.mark.slow
def test_print_config_writes_yaml_and_nothing_else(tmp_path):
    """``omgpt fit ... --print_config > run.yaml`` is a config file: the thread choice is not printed into it."""
    result = subprocess.run(
        [sys.executable, "-m", "omgpt", "fit", "--config", str(ROOT / "configs" / "demo.yaml"), "--print_config"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert not announced(result)
    config = yaml.safe_load(result.stdout)
    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    assert config["model"]["network"]["n_head"] == demo["model"]["network"]["n_head"]
    assert config["trainer"]["max_epochs"] == demo["trainer"]["max_epochs"]


def test_at_most_limits_the_block_and_restores_the_count():
    from omgpt.threads import at_most

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with at_most(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with at_most(None), at_most(4):  # no limit, or a limit above the count: unchanged
            assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), at_most(1):
            raise RuntimeError("the count comes back after an error too")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_rollout_plays_a_policy_on_its_cpu_threads():
    """A policy with ``cpu_threads = 1`` decides on one thread; one without, and a differentiable
    rollout (a training step's backward follows it), on the configured count."""
    from omgpt.policies import make_policy
    from omgpt.rollout import rollout
    from omgpt.tasks import make_task

    task = make_task("newsvendor")
    envs = task.sample_envs(2, torch.Generator().manual_seed(0))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for limit, differentiable, expected in ((1, False, 1), (None, False, 2), (1, True, 2)):
            policy = make_policy("fai", task)
            seen = []
            decide = policy.act
            policy.act = lambda t, x: (seen.append(torch.get_num_threads()), decide(t, x))[1]
            policy.cpu_threads = limit
            rollout(task, envs, policy, 3, torch.Generator().manual_seed(1), differentiable=differentiable)
            assert set(seen) == {expected} and torch.get_num_threads() == 2
        assert make_policy("erm", task).cpu_threads == 1
        assert make_policy("alg-star", task).cpu_threads == 1  # the collapsed sampler
        assert make_policy("alg-star", task, sampler="smc").cpu_threads is None
    finally:
        torch.set_num_threads(before)
