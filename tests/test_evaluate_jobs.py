"""``evaluate_policies(jobs=N)`` / ``omgpt evaluate --jobs N``: the (policy, batch of runs) units played
in N worker processes give the same histories, bit for bit, as one process playing them in turn."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import torch

from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.evaluation import evaluate_policies
from omgpt.model import ModelConfig, NetworkConfig, build_model
from omgpt.tasks import make_task


def tiny_model(task):
    """An untrained 1-layer, 8-dim OMGPT network for ``task`` (what it decides does not matter here)."""
    torch.manual_seed(0)
    return build_model(
        ModelConfig.build(NetworkConfig(n_layer=1, n_head=1, n_embd=8), task, max_steps=8),
        task.scaling(),
    )


@pytest.mark.slow
def test_two_jobs_give_the_histories_of_one():
    task = make_task("newsvendor", horizon=6)
    specs = {"omgpt": {"model": tiny_model(task)}, "erm": {}, "fai": {}, "oracle": {}}
    # 10 runs in batches of 3: four units per policy, the last one short
    one = evaluate_policies(task, specs, runs=10, horizon=6, seed=5, batch_size=3, progress=False, jobs=1)
    two = evaluate_policies(task, specs, runs=10, horizon=6, seed=5, batch_size=3, progress=False, jobs=2)
    assert list(two) == list(one)
    for name in one:
        for f in fields(one[name]):
            a, b = getattr(one[name], f.name), getattr(two[name], f.name)
            if f.name == "envs":
                assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
            else:
                assert torch.equal(a, b), (name, f.name)
    # common random numbers: every policy faced the same contexts
    assert torch.equal(two["omgpt"].contexts, two["oracle"].contexts)


@pytest.mark.slow
def test_an_error_in_a_worker_is_the_same_one_line_error():
    task = make_task("newsvendor", horizon=4)
    model = tiny_model(task)
    with torch.no_grad():
        model.action_head.bias.fill_(float("nan"))  # a diverged checkpoint
    for jobs in (1, 2):
        with pytest.raises(OMGPTError, match="policy 'omgpt' .*produced non-finite"):
            evaluate_policies(
                task,
                {"oracle": {}, "omgpt": {"model": model}},
                runs=4,
                horizon=4,
                batch_size=2,
                progress=False,
                jobs=jobs,
            )


def test_jobs_must_be_positive():
    with pytest.raises(OMGPTError, match="jobs"):
        evaluate_policies(make_task("newsvendor", horizon=3), {"oracle": {}}, runs=2, horizon=3, progress=False, jobs=0)


@pytest.mark.slow
def test_evaluate_jobs_writes_the_same_report(tmp_path: Path):
    args = [
        "evaluate",
        "--task",
        "newsvendor",
        "--policies",
        "fai,oracle",
        "--runs",
        "6",
        "--horizon",
        "5",
        "--batch-size",
        "2",
        "--no-progress",
    ]
    assert cli_main([*args, "--out", str(tmp_path / "one")]) == 0
    assert cli_main([*args, "--out", str(tmp_path / "two"), "--jobs", "2"]) == 0
    assert (tmp_path / "one" / "curves.csv").read_bytes() == (tmp_path / "two" / "curves.csv").read_bytes()
    assert cli_main([*args, "--out", str(tmp_path / "bad"), "--jobs", "0"]) == 2
