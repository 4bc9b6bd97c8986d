"""No path that draws environments and then plays them lets the play repeat the environments' draws.

The property, on every task and every such path (training histories, the mixed phase's self-rollouts,
validation, ``evaluate``, ``tune``, regret fine-tuning, ``time_to_quality``, the interpretability analyses):

* **in torch's seed bits**: no generator that plays an episode (the task's contexts and noise, the
  policy's own draws) was seeded with the torch seed of a generator that drew the episode's
  environments, unless it is that very generator going on (then its draws follow the environments',
  never repeat them). A CPU generator keeps the low 32 bits of a seed, so that is what is compared;
  seeds equal there draw identical streams, and observation noise is drawn from exactly these
  generators, so this covers the noise too.
* **in values**: no hidden environment parameter's value reappears among that episode's contexts (checked on
  the synthetic tasks; real demand's environments are the data its contexts are read from).

Regret fine-tuning once seeded its environments and its task noise alike, and the newsvendor's first
context then held the environment's own ``w``: both checks fail on that.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

import omgpt.rollout
from omgpt.seeding import EXPERIMENT_SEED, TUNING_SEED, torch_bits
from omgpt.tasks import make_episode_task, make_task
from omgpt.tasks.registry import TASKS

HORIZON, RUNS = 6, 4
SYNTHETIC = sorted(t for t in TASKS if t != "newsvendor-data")
REAL = {"newsvendor-data": dict(dataset="bakery", split="series", part="train")}


class Recorder:
    """Records every generator seeded during a path, which drew environments and which played."""

    def __init__(self):
        self.seeds: dict[int, list[int]] = {}  # id(generator) -> torch bits of every seed it was given
        self.keep: list[torch.Generator] = []  # alive, so ids stay unique
        self.env_draws: list[tuple[torch.Generator, int]] = []  # (generator, its seed bits then)
        self.plays: list[tuple[torch.Generator, torch.Generator | None, dict, omgpt.rollout.History]] = []

    @contextlib.contextmanager
    def watching(self, monkeypatch, task_cls):
        rec = self

        class SeedLogged(torch.Generator):
            def manual_seed(self, seed):
                rec.seeds.setdefault(id(self), []).append(torch_bits(seed))
                rec.keep.append(self)
                return super().manual_seed(seed)

        sample_envs, _rollout = task_cls.sample_envs, omgpt.rollout._rollout

        def logged_sample_envs(task, n, generator):
            self.env_draws.append((generator, self.seeds.get(id(generator), [None])[-1]))
            return sample_envs(task, n, generator)

        def logged_rollout(task, envs, policy, horizon, generator, policy_generator):
            # the observed parameters are shown to the policy by design (the newsvendor's holding cost is
            # its context's first feature): only the hidden ones must not reappear
            envs_before = {k: v.detach().clone() for k, v in envs.items() if k not in task.observed_params}
            history = _rollout(task, envs, policy, horizon, generator, policy_generator)
            self.plays.append((generator, policy_generator, envs_before, history))
            return history

        monkeypatch.setattr(torch, "Generator", SeedLogged)
        monkeypatch.setattr(task_cls, "sample_envs", logged_sample_envs)
        monkeypatch.setattr(omgpt.rollout, "_rollout", logged_rollout)
        yield self

    def check(self, values: bool) -> None:
        assert self.env_draws and self.plays, "the path drew no environments or played nothing"
        env_seeds = {(id(g), s) for g, s in self.env_draws if s is not None}
        for task_gen, policy_gen, envs, history in self.plays:
            for player in (task_gen, policy_gen):
                if player is None:
                    continue
                for env_id, seed in env_seeds:
                    if env_id == id(player):
                        continue  # the environments' own generator going on: later draws, not repeats
                    assert seed not in self.seeds.get(id(player), []), (
                        f"a generator that plays was seeded like the environments' (torch seed bits {seed})"
                    )
            if values:
                repeated = repeated_values(envs, history.contexts)
                assert not repeated, f"environment values reappear among the contexts: {repeated[:5]}"


def repeated_values(envs: dict[str, torch.Tensor], contexts: torch.Tensor) -> list[float]:
    """The non-integer environment values of each episode that are also among its contexts."""
    found = []
    for b in range(contexts.shape[0]):
        params = torch.cat([v[b].detach().double().flatten() for v in envs.values() if v.is_floating_point()])
        params = params[params != params.round()]
        ctx = contexts[b].detach().double().flatten()
        found += params[torch.isin(params, ctx)].tolist()
    return found


def task_for(name: str):
    return make_task(name, **REAL.get(name, {}))


def tiny_model(name: str):
    from omgpt.module import OMGPTModule

    return OMGPTModule(
        task=name,
        task_options=REAL.get(name),
        horizon=HORIZON,
        network=dict(n_layer=1, n_head=1, n_embd=8),
    )


# ------------------------------------------------------------------------------------------------
# The paths. Each takes a task name and plays through the project's own code.
def training_histories(name):
    from datamodules.history import HistoryDataModule

    dm = HistoryDataModule(task=name, task_options=REAL.get(name), horizon=HORIZON, batch_size=2, batches_per_epoch=2)
    dm.setup("fit")
    next(iter(dm.train_dataloader()))


def self_rollouts(name):
    from datamodules.history import HistoryDataModule
    from omgpt.callbacks import SelfRolloutRefresh

    module = tiny_model(name)
    schedule = dict(mixed=dict(start_epoch=0, rollouts=3, rollout_batch=3, batches_per_epoch=1))
    dm = HistoryDataModule(
        task=name, task_options=REAL.get(name), horizon=HORIZON, batch_size=2, batches_per_epoch=1, algorithm1=schedule
    )
    dm.trainer = SimpleNamespace(
        lightning_module=module,
        global_rank=0,
        current_epoch=0,
        reload_dataloaders_every_n_epochs=1,
        callbacks=[SelfRolloutRefresh()],
    )
    dm.setup("fit")
    next(iter(dm.train_dataloader()))


def validation(name):
    from omgpt.module import validation_envs, validation_rollout
    from omgpt.policies import make_policy

    task = make_episode_task(name, REAL.get(name), HORIZON).validation_task()
    envs = validation_envs(task, RUNS, 10_000)
    policy = make_policy("omgpt", task, model=tiny_model(name).model)
    validation_rollout(task, envs, torch.arange(RUNS), policy, HORIZON, 10_000)


def evaluate(name, seed=EXPERIMENT_SEED):
    from omgpt.evaluation import evaluate_policies

    task = make_episode_task(name, dict(REAL.get(name, {}), part="test") if name in REAL else None, HORIZON)
    evaluate_policies(task, {"random": {}}, RUNS, HORIZON, seed, progress=False)


def tune(name):
    evaluate(name, seed=TUNING_SEED)  # omgpt tune evaluates on a validation seed's own streams


def regret_finetuning(name):
    from omgpt.module import OMGPTModule

    task = task_for(name)
    module = OMGPTModule(
        task=name,
        task_options=REAL.get(name),
        horizon=HORIZON,
        network=dict(n_layer=1, n_head=1, n_embd=8),
        finetune=dict(
            objective="regret",
            estimator="score" if task.discrete or name in ("queueing", "revenue") else "pathwise",
            rollout_envs=RUNS,
            group_size=2,
        ),
    )
    module.regret_loss()


def time_to_quality(name):
    from benchmarks.time_to_quality import validation_regret
    from omgpt.module import validation_envs
    from omgpt.policies import make_policy

    task = make_episode_task(name, REAL.get(name), HORIZON).validation_task()
    envs = validation_envs(task, RUNS, 10_000)
    validation_regret(task, envs, lambda: make_policy("random", task), HORIZON, 10_000, 2)


def analyses(name):
    """The interpretability analyses: a probe's two sets, the training-OOD map and, where the action is
    one continuous number, the context manipulation."""
    from omgpt.analysis.manipulation import manipulate
    from omgpt.analysis.probing import run_probes
    from omgpt.analysis.tsne import training_ood

    model, task = tiny_model(name).model, task_for(name)
    run_probes(model, task, 8, 4, HORIZON, "omgpt", EXPERIMENT_SEED)
    training_ood([("model", model)], task, n_seq=4, steps=HORIZON, seed=EXPERIMENT_SEED, alg_star=False)
    if not task.discrete and task.action_dim == 1:
        manipulate(model, task, n=4, step=HORIZON, columns="all", seed=EXPERIMENT_SEED)


PATHS = [training_histories, self_rollouts, validation, evaluate, tune, regret_finetuning, time_to_quality, analyses]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("name", SYNTHETIC + sorted(REAL))
def test_play_never_repeats_the_environments_draws(monkeypatch, name, path):
    task_cls = type(task_for(name))
    with Recorder().watching(monkeypatch, task_cls) as rec:
        path(name)
    rec.check(values=name not in REAL)


def test_the_check_sees_a_shared_seed(monkeypatch):
    """The check itself: environments and noise from two generators seeded alike are caught."""
    from omgpt.policies import make_policy

    task = make_task("newsvendor")
    with Recorder().watching(monkeypatch, type(task)) as rec:
        envs = task.sample_envs(RUNS, torch.Generator().manual_seed(123))
        omgpt.rollout.rollout(task, envs, make_policy("random", task), HORIZON, torch.Generator().manual_seed(123))
    with pytest.raises(AssertionError):
        rec.check(values=True)
