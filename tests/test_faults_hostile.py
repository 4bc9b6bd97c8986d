"""Hostile inputs on the surfaces issue 34's probe of fc4ae5b found open, each now one line (an
``OMGPTError``; ``omgpt: error:`` and exit code 2 on the command line) or a correct result, with nothing
already written changed:

1. a fresh fit never writes into a run folder that holds a run;
2. finite inputs give finite actions or an error: the Agent and the Gymnasium environments refuse
   non-finite and out-of-bound contexts, outcomes and actions; large seeds are reduced; ``render_mode``
   and ``reset(options=)`` are not taken silently;
3. work is estimated before it starts: the report's bootstrap memory, the rollout loop's steps;
4. ``--redraw`` checks the whole experiment.json, panel by panel;
5. the rest: bad Python calls, a Ctrl-C during the command's imports, the example task's sizes,
   one-line messages;
6. messages that name what is wrong: another task's checkpoint behind a card or store record, a
   file-size limit while writing.
"""

from __future__ import annotations

import ast
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import omgpt
from omgpt import checks
from omgpt.agent import Agent
from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from tests.test_safety import fit_args, one_line_error, snapshot

ROOT = Path(__file__).resolve().parents[1]


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert isinstance(error.value, OMGPTError) and message and "\n" not in message, repr(message)
    return message


# --------------------------------------------------------------------------------------------------
# 1. A run folder is never overwritten
@pytest.mark.slow
def test_a_fresh_fit_into_a_finished_runs_folder_is_refused_and_leaves_every_byte(tmp_path, capsys, monkeypatch):
    """A fresh fit aimed at a finished run's folder replaced its last.ckpt, metrics.csv and config.yaml,
    leaving two runs' checkpoints mixed in one folder."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    runs, version = tmp_path / "runs", ("--trainer.logger.init_args.version", "version_0")
    assert cli_main(fit_args(runs, *version)) == 0
    folder = runs / "omgpt" / "version_0"
    before = snapshot(folder)
    assert "checkpoints/last.ckpt" in before and "metrics.csv" in before
    capsys.readouterr()
    assert cli_main(fit_args(runs, *version, "--trainer.max_steps", "3", "--seed_everything", "7")) == 2
    line = one_line_error(capsys)
    assert "already holds a run" in line and "--ckpt_path last" in line and "version" in line, line
    assert snapshot(folder) == before


def test_a_fresh_fit_into_an_interrupted_runs_folder_is_refused(tmp_path, capsys, monkeypatch):
    """A run that stopped before its first checkpoint still left its config: the folder is its."""
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    folder = tmp_path / "runs" / "omgpt" / "run"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("an interrupted run's config\n")
    assert cli_main(fit_args(tmp_path / "runs", "--trainer.logger.init_args.version", "run")) == 2
    assert "already holds a run (config.yaml)" in one_line_error(capsys)
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml"]
    assert (folder / "config.yaml").read_text() == "an interrupted run's config\n"


# --------------------------------------------------------------------------------------------------
# 2. Finite inputs give finite actions, or an error
@pytest.mark.parametrize("case", ["act 1e30", "act nan", "observe 1e30", "observe inf", "observe negative demand"])
def test_the_agent_refuses_non_finite_and_out_of_bound_inputs(case):
    """``act([1e30]*5)`` and ``observe(1e30)`` returned NaN orders; ``observe(-5)``, a negative demand, was
    learned from."""
    agent = Agent.from_policy("erm", "newsvendor")
    agent.reset()
    verb, value = case.split(" ", 1)
    if verb == "act":
        with pytest.raises(OMGPTError) as error:
            agent.act([float(value)] * 5)
        assert "the context holds" in one_line(error)
    else:
        agent.act(np.full(5, 0.5, np.float32))
        bad = {"1e30": 1e30, "inf": math.inf, "negative demand": -5.0}[value]
        with pytest.raises(OMGPTError) as error:
            agent.observe(bad)
        assert "the outcome holds" in one_line(error)
        agent.observe(3.0)  # the step can still be completed
        assert np.isfinite(agent.act(np.full(5, 0.5, np.float32))).all()


def test_the_agents_largest_accepted_inputs_give_finite_actions():
    """Within the bound, every benchmark that needs no hidden environment acts with finite numbers."""
    for task, policy in [("newsvendor", "erm"), ("newsvendor", "fai"), ("pricing", "ilse"), ("pricing", "cils")]:
        agent = Agent.from_policy(policy, task)
        agent.reset()
        x = np.full(agent.task.context_dim, checks.MAGNITUDE, np.float32)
        for _ in range(3):
            try:
                a = agent.act(x)
            except OMGPTError as e:  # a policy's numerical failure is allowed, as one line
                assert "\n" not in str(e)
                break
            assert np.isfinite(a).all(), (task, policy, a)
            agent.observe(np.full(agent.task.obs_dim, checks.MAGNITUDE, np.float32))


@pytest.mark.parametrize("vector", [False, True], ids=["env", "vector-env"])
@pytest.mark.parametrize("task", ["newsvendor", "pricing"])
@pytest.mark.parametrize("value", [np.nan, np.inf, 1e30])
def test_env_step_refuses_non_finite_and_huge_actions(task, vector, value):
    """``env.step(nan)`` was played, with reward nan."""
    if vector:
        env = gym.make_vec(f"omgpt/{task}-v0", num_envs=2, vectorization_mode="vector_entry_point")
        action = np.array([[value], [1.0]], np.float32)
    else:
        env = gym.make(f"omgpt/{task}-v0")
        action = np.array([value], np.float32)
    env.reset(seed=0)
    with pytest.raises(OMGPTError) as error:
        env.step(action)
    assert "the action holds" in one_line(error)


@pytest.mark.parametrize("vector", [False, True], ids=["env", "vector-env"])
def test_a_seed_gymnasium_accepts_is_accepted_and_reproducible(vector):
    """``reset(seed=2**70)`` overflowed torch's generator."""
    env = (
        gym.make_vec("omgpt/newsvendor-v0", num_envs=2, vectorization_mode="vector_entry_point")
        if vector
        else gym.make("omgpt/newsvendor-v0")
    )
    first, _ = env.reset(seed=2**70)
    again, _ = env.reset(seed=2**70)
    other, _ = env.reset(seed=2**70 + 1)
    small, _ = env.reset(seed=5)
    assert np.array_equal(first["context"], again["context"]) and not np.array_equal(first["context"], other["context"])
    assert not np.array_equal(first["context"], small["context"])


def test_render_mode_and_reset_options_are_not_taken_silently():
    """``render_mode=`` was taken as a task option; ``reset(options=...)`` was ignored."""
    assert gym.make("omgpt/newsvendor-v0", render_mode=None).reset(seed=0)
    with pytest.raises(OMGPTError) as error:
        gym.make("omgpt/newsvendor-v0", render_mode="human")
    assert "render_mode 'human'" in one_line(error)
    env = gym.make("omgpt/newsvendor-v0")
    assert env.reset(seed=0, options={})  # empty: nothing to ignore
    with pytest.raises(OMGPTError) as error:
        env.reset(seed=0, options={"dim": 3})
    assert "take no reset options" in one_line(error)
    vec = gym.make_vec("omgpt/newsvendor-v0", num_envs=2, vectorization_mode="vector_entry_point")
    with pytest.raises(OMGPTError):
        vec.reset(seed=0, options={"dim": 3})


def test_agent_reset_with_unequal_batches_is_one_line():
    agent = Agent.from_policy("oracle", "newsvendor")
    envs = gym.make_vec("omgpt/newsvendor-v0", num_envs=3, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    hidden = dict(envs.unwrapped.envs)
    hidden["w"] = hidden["w"][:2]
    with pytest.raises(OMGPTError) as error:
        agent.reset(envs=hidden)
    assert "one row per episode" in one_line(error)
    with pytest.raises(OMGPTError):
        agent.reset(envs=[1, 2])
    agent.reset(envs=envs.unwrapped.envs)  # the right one still works
    assert agent.batch == 3


def test_an_agent_without_envs_plays_a_data_benchmark_from_the_window_s_own_days():
    """The data benchmarks read the window's public look-back, not a hidden parameter. An agent given no
    ``envs`` (a practitioner's own series) plays them from an empty look-back: the first order is the
    context's look-back quantile, then SAA orders the quantile of the demands it has been told. The
    hindsight yardstick, which reads the window's future, and the oracles are still refused in one line."""
    from omgpt.tasks.newsvendor_data import LOOKBACK_QUANTILE, Q

    agent = Agent.from_policy("saa", "newsvendor-data")
    agent.reset()
    x = np.zeros(agent.policy.task.context_dim, np.float32)
    x[Q], x[LOOKBACK_QUANTILE] = 0.75, 1.3
    assert agent.act(x)[0] == pytest.approx(1.3)
    for demand in (0.5, 2.0, 1.0, 4.0):  # the 0.75-quantile of the four: the third smallest, 2.0
        agent.observe(np.array([demand], np.float32))
        order = agent.act(x)[0]
    assert order == pytest.approx(2.0)
    for name in ("saa-weekday", "qr", "fai-data"):
        other = Agent.from_policy(name, "newsvendor-data")
        other.reset()
        assert other.act(x)[0] == pytest.approx(1.3), name
    from omgpt.policies.newsvendor_data import LAGS, MEANS, lag_features  # gbm's lags of nothing seen: missing

    assert lag_features(torch.zeros(2, 0)).isnan().all() and lag_features(torch.zeros(2, 0)).shape == (
        2,
        len(LAGS) + len(MEANS),
    )
    with pytest.raises(OMGPTError) as error:
        hindsight = Agent.from_policy("hindsight-linear", "newsvendor-data")
        hindsight.reset()
        hindsight.act(x)
    line = one_line(error)
    assert "hidden" not in line and "which window of the data set it plays" in line and "reset(envs=" in line, line
    oracle = Agent.from_policy("oracle", "newsvendor")
    oracle.reset()
    with pytest.raises(OMGPTError, match="the hidden environment"):
        oracle.act(np.full(5, 0.5, np.float32))


# --------------------------------------------------------------------------------------------------
# 3. Every resource estimated before work
@pytest.fixture
def no_rollout(monkeypatch):
    """``omgpt evaluate`` and ``omgpt tune`` fail the test if they get as far as their work."""
    from omgpt.commands import evaluate, tune

    def started(*args, **kwargs):
        raise AssertionError("the work started")

    monkeypatch.setattr(evaluate, "evaluate_policies", started)
    monkeypatch.setattr(tune, "run_tuning", started)


def test_evaluate_counts_the_bootstrap_in_its_memory_estimate(tmp_path, capsys, monkeypatch, no_rollout):
    """``--runs 10000 --horizon 100`` passed the memory check, rolled out, then failed in the bootstrap's
    (2000, runs, T) array (14.9 GiB). Here 2,000 runs of 50 steps with 64 MiB free: the histories fit,
    the report's curves and bootstrap do not."""
    monkeypatch.setattr(checks, "free_memory", lambda dev: 64 * 2**20)
    out = tmp_path / "eval"
    args = [
        "evaluate",
        "--task",
        "newsvendor",
        "--policies",
        "oracle",
        "--runs",
        "2000",
        "--horizon",
        "50",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli_main(args) == 2
    assert "of memory" in one_line_error(capsys)
    assert not out.exists()


def test_the_bootstrap_never_builds_the_whole_resample_and_gives_the_same_numbers(monkeypatch):
    """In blocks of 1 MiB: the peak memory stays far below the 160 MB of ``values[idx]`` in one piece,
    and the interval is the one-piece interval, bit for bit."""
    import tracemalloc

    from omgpt.analysis.report import BOOTSTRAP_SAMPLES, mean_band_ci

    monkeypatch.setattr(checks, "BOOTSTRAP_BYTES", 2**20)
    values = np.random.default_rng(3).normal(size=(200, 50)).cumsum(axis=1)
    idx = np.random.default_rng(0).integers(0, 200, size=(BOOTSTRAP_SAMPLES, 200))
    whole = np.percentile(values[idx].mean(axis=1), [5, 95], axis=0)
    tracemalloc.start()
    try:
        ci = mean_band_ci(values)["ci90"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(ci, whole)
    assert peak < 20 * 2**20, f"{peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("command", ["evaluate", "tune"])
def test_work_beyond_the_loop_step_bound_is_refused_unless_forced(command, tmp_path, capsys, monkeypatch, no_rollout):
    """``evaluate --runs 4 --horizon 10**7`` passed every check and would have run for about 1.5 h (then
    needed a 596 GiB bootstrap); ``tune --horizon 10**7`` had no estimate at all. (Memory is plenty here:
    the histories' 4 GiB are refused on a small machine before the time is estimated.)"""
    monkeypatch.setattr(checks, "free_memory", lambda dev: 2**40)
    out = tmp_path / "eval"
    args = (
        [
            "evaluate",
            "--task",
            "newsvendor",
            "--policies",
            "erm",
            "--runs",
            "4",
            "--horizon",
            str(10**7),
            "--out",
            str(out),
            "--no-progress",
        ]
        if command == "evaluate"
        else ["tune", "--task", "mab", "--policies", "ucb", "--runs", "4", "--horizon", str(10**7)]
    )
    assert cli_main(args) == 2
    line = one_line_error(capsys)
    assert "steps of the rollout loop" in line and "--force" in line, line
    assert not out.exists()
    with pytest.raises(AssertionError, match="the work started"):  # forced: on to the work
        cli_main(args + ["--force"])


# --------------------------------------------------------------------------------------------------
# 4. --redraw checks the whole experiment.json
def _damage(panel: dict, case: str) -> None:
    first = next(iter(panel["policies"].values()))
    if case == "no policies":
        del panel["policies"]
    elif case == "string mean":
        first["final_regret"]["mean"] = "12.5"
    elif case == "NaN mean":
        first["final_regret"]["mean"] = math.nan
    elif case == "short curve":
        first["curves"]["regret"]["mean"] = first["curves"]["regret"]["mean"][:-3]
    elif case == "no costs":
        del panel["costs"]
    elif case == "no series":
        del panel["series"]
    elif case == "NaN cost":
        panel["costs"]["omgpt"]["scaled_cost"]["mean"] = math.nan
    elif case == "a policy only in costs":
        panel["costs"]["ghost"] = dict(panel["costs"]["omgpt"])


REDRAW_CASES = [("main-results", c) for c in ("no policies", "string mean", "NaN mean", "short curve", "no panels")]
REDRAW_CASES += [
    ("real-demand", c) for c in ("no policies", "no costs", "no series", "NaN cost", "a policy only in costs")
]


@pytest.mark.parametrize("name, case", REDRAW_CASES, ids=[f"{n}: {c}" for n, c in REDRAW_CASES])
def test_redraw_refuses_a_damaged_experiment_json_in_one_line_and_changes_nothing(name, case, tmp_path, capsys):
    """Only the top level was checked: a panel without ``policies`` / ``costs`` / ``series``, a string
    mean, a short curve or ``panels: []`` ended in a traceback; a NaN mean was reported as "OMGPT nan is
    NOT below..."; a policy only in ``costs`` was drawn as an extra row."""
    out = tmp_path / name
    shutil.copytree(ROOT / "results" / name, out)
    result = json.loads((out / "experiment.json").read_text())
    if case == "no panels":
        result["panels"] = []
    else:
        _damage(result["panels"][0], case)
    (out / "experiment.json").write_text(json.dumps(result))  # NaN as the token NaN, as a hand edit would
    before = snapshot(out)
    assert cli_main(["experiment", name, "--redraw", "--out", str(out)]) == 2
    line = one_line_error(capsys)
    assert "experiment.json" in line, line
    assert snapshot(out) == before


# --------------------------------------------------------------------------------------------------
# 5. The rest
@pytest.mark.parametrize("path", [None, 3, ["pretrained/newsvendor"]])
def test_load_model_with_no_path_is_one_line(path):
    with pytest.raises(OMGPTError) as error:
        omgpt.load_model(path)
    assert "needs the path of a checkpoint" in one_line(error)


def test_load_model_onto_cuda_without_a_gpu_says_so(monkeypatch):
    """It asked "is the file complete?" about a sound file."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(OMGPTError) as error:
        omgpt.load_model(ROOT / "pretrained" / "newsvendor", map_location="cuda")
    line = one_line(error)
    assert "no CUDA device" in line and "complete" not in line, line


@pytest.mark.parametrize("option", ["customers", "dim"])
def test_the_example_task_refuses_a_zero_size(option):
    import examples.logit_pricing  # noqa: F401  (registers logit-pricing)
    from omgpt.tasks import make_task

    with pytest.raises(OMGPTError) as error:
        make_task("logit-pricing", **{option: 0})
    assert f"{option} must be a positive integer, got 0" in one_line(error)


def test_an_omgpt_error_is_one_line_whatever_it_was_built_from():
    """A library's multi-line message passed on (``OMGPTError(str(e))``) made a two-line error."""
    from omgpt.records import RecordError

    assert str(OMGPTError("first line\n  second line\n")) == "first line; second line"
    assert str(RecordError("a\nb")) == "a; b"


def test_no_error_message_in_the_code_is_written_over_two_lines():
    """Every ``OMGPTError`` / ``RecordError`` raised with a literal message has no line break in it."""
    found = []
    for folder in ("omgpt", "analysis", "callbacks", "datamodules", "examples", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                    "OMGPTError",
                    "RecordError",
                ):
                    texts = [
                        n.value
                        for arg in node.args
                        for n in ast.walk(arg)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    ]
                    found += [f"{path.relative_to(ROOT)}:{node.lineno}" for t in texts if "\n" in t]
    assert not found, found


def test_ctrl_c_during_the_commands_imports_is_one_line_and_exit_130(tmp_path):
    """SIGINT while ``omgpt tune`` imported torch and Lightning gave a KeyboardInterrupt traceback."""
    import os

    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
        "OMGPT_TUNED_DIR": str(tmp_path),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "omgpt", "tune", "--task", "mab", "--horizon", "5", "--runs", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(0.5)  # python has started; torch, gymnasium and Lightning take seconds more
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines() == ["omgpt: interrupted"], err[-2000:]
    assert not list(tmp_path.iterdir())


def test_the_store_keeps_a_fit_that_failed_before_its_first_checkpoint_aside(tmp_path, monkeypatch):
    """The store retrains a slot whose fit failed early: that run's folder, which a fresh fit now refuses,
    is kept aside as it was, and the new fit starts fresh (no --ckpt_path)."""
    from omgpt.commands import store

    run = tmp_path / "slot" / "run"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("the failed run's config\n")
    calls = []
    monkeypatch.setattr(store.subprocess, "call", lambda cmd, **kwargs: calls.append(cmd) or 0)
    store.fit(["--config", "x.yaml"], run, tmp_path / "slot" / "train.log", "a model")
    (aside,) = [p for p in run.parent.iterdir() if p.name.startswith("run-failed-")]
    assert (aside / "config.yaml").read_text() == "the failed run's config\n" and not run.exists()
    assert "--ckpt_path" not in calls[0]


@pytest.mark.parametrize("call", ["Agent('erm')", "from_policy task None", "from_policy task 3"])
def test_other_bad_python_calls_are_one_line(call):
    """``Agent("erm")`` and ``Agent.from_policy("erm", None)`` ended in an AttributeError."""
    build = {
        "Agent('erm')": lambda: Agent("erm"),
        "from_policy task None": lambda: Agent.from_policy("erm", None),
        "from_policy task 3": lambda: Agent.from_policy("erm", 3),
    }[call]
    with pytest.raises(OMGPTError) as error:
        build()
    one_line(error)


# --------------------------------------------------------------------------------------------------
# 6. Messages that name what is wrong
def _swapped_for_a_pricing_model(folder: Path, record: str) -> None:
    """``folder``'s model.ckpt replaced by the shipped pricing model, its record's checksum re-stamped."""
    from omgpt.records import checksum

    shutil.copy(ROOT / "pretrained" / "pricing" / "model.ckpt", folder / "model.ckpt")
    info = json.loads((folder / record).read_text())
    info["checksum"] = checksum(folder / "model.ckpt")
    (folder / record).write_text(json.dumps(info))


def test_another_tasks_model_behind_a_card_says_so(tmp_path, monkeypatch, capsys):
    """A pricing model behind the newsvendor card said "task options {} change the token sizes"."""
    import omgpt.commands.experiment.models as models

    for name in ("newsvendor", "newsvendor-censored"):
        shutil.copytree(ROOT / "pretrained" / name, tmp_path / "pretrained" / name)
    _swapped_for_a_pricing_model(tmp_path / "pretrained" / "newsvendor", "card.json")
    monkeypatch.setattr(models, "PRETRAINED", tmp_path / "pretrained")
    monkeypatch.setattr(sys, "argv", ["omgpt"])
    args = ["experiment", "horizon-generalisation", "--models-dir", str(tmp_path / "m"), "--out", str(tmp_path / "o")]
    assert cli_main(args) == 2
    line = one_line_error(capsys)
    assert "newsvendor/model.ckpt is a checkpoint of task pricing" in line and "not newsvendor {}" in line, line
    assert "card.json says" in line and not (tmp_path / "o").exists()


def test_another_tasks_model_in_a_store_folder_says_so(tmp_path):
    from omgpt.commands.experiment import load_experiment
    from omgpt.commands.experiment.models import train_model

    model = load_experiment("alg-star-match", "cpu").models["newsvendor-4"]
    folder = tmp_path / "models" / "newsvendor-2dcbc70abf"  # that model's slot
    shutil.copytree(ROOT / "results" / "models" / folder.name, folder)
    train_model("newsvendor-4", model, scale="cpu", models_dir=tmp_path / "models", extra_configs=[])  # its own: reused
    _swapped_for_a_pricing_model(folder, "done.json")
    with pytest.raises(OMGPTError) as error:
        train_model("newsvendor-4", model, scale="cpu", models_dir=tmp_path / "models", extra_configs=[])
    line = one_line(error)
    assert "model.ckpt is a checkpoint of task pricing" in line and "done.json says" in line, line


def test_a_file_size_limit_names_the_file_being_written(tmp_path):
    """``ulimit -f`` (a stand-in for a full disk): "[Errno 27] File too large", naming no file; now the
    file under --out (not the temporary folder it was written in), and nothing is left behind."""
    import os
    import resource

    out = tmp_path / "eval"
    done = subprocess.run(
        [sys.executable, "-m", "omgpt", "evaluate", "--task", "newsvendor", "--policies", "oracle,erm",
         "--runs", "2", "--horizon", "3", "--out", str(out), "--no-progress"],
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000)),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"omgpt: error: File too large: {out}/") and ".tmp" not in line, line
    assert list(tmp_path.iterdir()) == []
