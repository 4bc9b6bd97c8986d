"""Using a trained model anywhere (issue 26): ``omgpt.load_model`` without Lightning, and ``omgpt.Agent``.

* load_model builds the network ``load_module`` builds, with the same weights, from every shipped
  model and from tiny checkpoints of every architecture option; it never imports Lightning; a missing,
  truncated, foreign, malicious or diverged file is one-line :class:`OMGPTError`, as for load_module;
* an Agent's actions are a rollout's, exactly, on the same histories: OMGPT through its KV cache (every
  layout, a rolling window, the LSTM), a sampled discrete policy, context-dependent projections, and
  benchmarks by name; inputs in every form come back in the same form;
* misuse -- wrong shapes, acting twice, observing first, a horizon past max_steps without a window,
  an oracle without its environment -- is one line.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import omgpt
from omgpt import Agent, load_model
from omgpt.errors import OMGPTError
from omgpt.model import HPARAMS, ModelConfig, NetworkConfig, build_model
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_episode_task

ROOT = Path(__file__).resolve().parents[1]
NEWSVENDOR = ROOT / "pretrained" / "newsvendor"
SHIPPED = sorted(p.parent.name for p in (ROOT / "pretrained").glob("*/model.ckpt"))


def tiny_checkpoint(path: Path, seed: int = 0, network: dict | None = None, **hparams) -> Path:
    """A checkpoint as ``omgpt fit`` writes one (the module's state dict and hyper-parameters) of a tiny
    OMGPTModule (``network`` settings over 1 layer, 2 heads, 8 dims), written without training it."""
    from omgpt.module import OMGPTModule

    torch.manual_seed(seed)
    network = {"n_layer": 1, "n_head": 2, "n_embd": 8, **(network or {})}
    module = OMGPTModule(**{"task": "newsvendor", "horizon": 6, "network": network, **hparams})
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    return path


def tiny_model(task, horizon: int, layout: str = "paper", backbone: str = "gpt"):
    """A randomly initialised 2-layer, 8-dim network for ``task``."""
    torch.manual_seed(1)
    cfg = ModelConfig(
        feature_dim=task.feature_dim,
        action_dim=task.action_dim,
        n_layer=2,
        n_head=2,
        n_embd=8,
        max_steps=horizon,
        obs_dim=task.obs_dim,
        layout=layout,
        backbone=backbone,
    )
    return build_model(cfg, task.scaling())


# --------------------------------------------------------------------------------------------------
# load_model
@pytest.mark.parametrize("name", SHIPPED)
def test_load_model_builds_load_modules_network_from_every_shipped_model(name):
    from omgpt.module import load_module

    model, task, hparams = load_model(ROOT / "pretrained" / name)
    module = load_module(str(ROOT / "pretrained" / name))
    assert model.cfg == module.model.cfg and task.name == module.task.name and task.options() == module.task.options()
    assert not model.training and hparams["horizon"] == module.hparams.horizon
    theirs = module.model.state_dict()
    assert model.state_dict().keys() == theirs.keys()
    assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items())


ARCHITECTURES = {
    "paper": {},
    "compact-rope": {"network": {"layout": "compact", "pos_encoding": "rope"}},
    "transition-obs-head": {"network": {"layout": "transition", "obs_head": True}},
    "lstm": {"network": {"backbone": "lstm"}},
    "window": {"window": 3, "horizon": 8},
    "pricing-options": {"task": "pricing", "task_options": {"dim": 3}},
}


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_load_model_reads_every_architecture_option(arch, tmp_path):
    from omgpt.module import load_module

    path = tiny_checkpoint(tmp_path / "m.ckpt", **ARCHITECTURES[arch])
    model, task, _ = load_model(path)
    module = load_module(str(path))
    assert model.cfg == module.model.cfg
    features = torch.randn(2, model.cfg.max_steps, model.cfg.feature_dim)
    actions = torch.randn(2, model.cfg.max_steps, model.cfg.action_dim)
    assert torch.equal(model(features, actions), module.model.eval()(features, actions))


def test_load_model_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    load_model(NEWSVENDOR)
    assert torch.equal(torch.get_rng_state(), state)


def test_the_hyper_parameter_groups_are_omgpt_modules_arguments():
    """load_model refuses what it does not know, so its groups must be exactly what OMGPTModule takes;
    the network's settings are NetworkConfig's, whose defaults OMGPTModule's default network holds."""
    from omgpt.module import OMGPTModule

    params = inspect.signature(OMGPTModule.__init__).parameters
    assert sorted(HPARAMS) == sorted(set(params) - {"self"}) and len(HPARAMS) == len(set(HPARAMS))
    assert params["network"].default == NetworkConfig()


def test_a_checkpoint_from_before_the_network_group_loads_as_it_was_trained(tmp_path):
    """Checkpoints written before ``model.network`` hold the network's settings at the top level (the
    shipped reference models among them): they load into the same network, and a fit may start from one."""
    from omgpt.module import OMGPTModule, load_module

    new = tiny_checkpoint(tmp_path / "new.ckpt", network={"layout": "transition", "n_embd": 16})
    ckpt = torch.load(new, weights_only=True)
    network = ckpt["hyper_parameters"].pop("network")
    ckpt["hyper_parameters"].update({k: v for k, v in network.items() if k != "bias"})  # the old form
    torch.save(ckpt, tmp_path / "old.ckpt")
    old_model, _, hparams = load_model(tmp_path / "old.ckpt")
    assert hparams["network"] == network and old_model.cfg == load_model(new).model.cfg
    assert old_model.cfg.layout == "transition" and old_model.cfg.n_embd == 16
    features, actions = torch.randn(2, 6, old_model.cfg.feature_dim), torch.randn(2, 6, 1)
    assert torch.equal(old_model(features, actions), load_module(str(tmp_path / "old.ckpt")).model(features, actions))
    module = OMGPTModule(
        task="newsvendor",
        horizon=6,
        network={**network, "dropout": 0.0},
        finetune={"init_from": str(tmp_path / "old.ckpt")},
    )
    module.setup("fit")  # fine-tuning's start: the old checkpoint's settings are this run's (dropout aside)
    assert torch.equal(module.model.eval()(features, actions), old_model(features, actions))
    both = {**ckpt, "hyper_parameters": {**ckpt["hyper_parameters"], "network": network}}
    torch.save(both, tmp_path / "both.ckpt")
    with pytest.raises(OMGPTError, match="both in network and at the top level"):
        load_model(tmp_path / "both.ckpt")


def test_loading_a_model_and_acting_never_import_lightning():
    code = f"""
import sys, gymnasium, omgpt
omgpt.load_model({str(NEWSVENDOR)!r})
import omgpt.files, omgpt.model, omgpt.tasks, omgpt.policies, omgpt.rollout, omgpt.agent, omgpt.envs.env
agent = omgpt.Agent.load({str(NEWSVENDOR)!r})
env = gymnasium.make("omgpt/newsvendor-v0")
obs, info = env.reset(seed=0)
agent.reset()
env.step(agent.act(obs["context"]))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("lightning", "pytorch_lightning", "lightning_fabric"))
assert not loaded, loaded
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]


class Payload:
    """Unpickling this creates ``marker``: what a malicious checkpoint would do instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _widen_a_matrix(ckpt: dict) -> None:
    name = next(k for k, v in ckpt["state_dict"].items() if v.dim() == 2)
    ckpt["state_dict"][name] = torch.zeros(3, 5)


def _poison(ckpt: dict) -> None:
    name = next(k for k, v in ckpt["state_dict"].items() if v.dim() == 2)
    ckpt["state_dict"][name] = ckpt["state_dict"][name].clone().fill_(float("nan"))


EDITS = {  # defect -> (edit of the checkpoint dict, the message), the cases of tests/test_faults.py and test_safety.py
    "extra hyper-parameter": (
        lambda c: c["hyper_parameters"].update(colour=3),
        "hyper-parameters OMGPTModule does not take: colour",
    ),
    "wrongly shaped tensor": (_widen_a_matrix, "weights do not fit the model its settings describe"),
    "missing tensor": (
        lambda c: c["state_dict"].pop("model.ln_f.weight"),
        "weights do not fit the model its settings describe (model.ln_f.weight)",
    ),
    "non-finite weights": (_poison, "has non-finite weights: its fit diverged"),
    "no hyper-parameters": (lambda c: c.pop("hyper_parameters"), "is not an OMGPT checkpoint"),
    "unknown task": (lambda c: c["hyper_parameters"].update(task="no-such-task"), "unknown task 'no-such-task'"),
    "impossible settings": (
        lambda c: c["hyper_parameters"].get("network", c["hyper_parameters"]).update(layout="spiral"),  # either form
        "layout must be one of",
    ),
}


@pytest.mark.parametrize("defect", list(EDITS))
def test_a_foreign_or_diverged_checkpoint_is_one_line(defect, tmp_path):
    data = torch.load(NEWSVENDOR / "model.ckpt", map_location="cpu", weights_only=True)
    edit, message = EDITS[defect]
    edit(data)
    torch.save(data, tmp_path / "x.ckpt")
    with pytest.raises(OMGPTError) as error:
        load_model(tmp_path / "x.ckpt")
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("bad", ["missing", "empty folder", "truncated", "garbage", "not-a-checkpoint", "malicious"])
def test_a_missing_unreadable_or_malicious_file_is_one_line_and_runs_no_code(bad, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # as torch before 2.6 defaulted
    path = tmp_path / "x.ckpt"
    if bad == "empty folder":
        path = tmp_path
    elif bad == "truncated":
        path.write_bytes((NEWSVENDOR / "model.ckpt").read_bytes()[:5000])
    elif bad == "garbage":
        path.write_bytes(b"\x00not a checkpoint" * 100)
    elif bad == "not-a-checkpoint":
        torch.save({"weights": torch.zeros(3)}, path)
    elif bad == "malicious":
        torch.save({"state_dict": {}, "payload": Payload(tmp_path / "pwned")}, path)
    expected = {
        "missing": "checkpoint not found",
        "empty folder": "checkpoint not found",
        "not-a-checkpoint": "is not a Lightning checkpoint",
        "malicious": "refusing to load checkpoint",
    }.get(bad, "cannot read checkpoint")
    with pytest.raises(OMGPTError) as error:
        Agent.load(path)
    assert expected in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "pwned").exists(), "the checkpoint ran code"


# --------------------------------------------------------------------------------------------------
# The Agent plays as the rollout does.
CASES = {  # id -> (task, layout, window, backbone): what each adds
    "newsvendor": ("newsvendor", "paper", None, "gpt"),
    "window": ("newsvendor", "transition", 3, "gpt"),  # t >= W re-encodes the rolling window
    "mab-sampled": ("mab", "compact", None, "gpt"),  # a discrete policy sampling from the agent's generator
    "queueing-grid": ("queueing", "paper", None, "gpt"),  # actions rounded onto the task's grid
    "nonperishable": ("newsvendor-nonperishable", "transition", None, "gpt"),  # a projection that reads the context
    "linear-bandit": ("linear-bandit", "paper", None, "gpt"),  # vector actions projected onto the ball
    "lstm": ("pricing", "paper", None, "lstm"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_agents_actions_are_the_rollouts_on_the_same_histories(case):
    name, layout, window, backbone = CASES[case]
    horizon, batch = 7, 3
    task = make_episode_task(name, None, horizon)
    model = tiny_model(task, window or horizon, layout, backbone)
    g = torch.Generator().manual_seed(4)
    history = rollout(
        task,
        task.sample_envs(batch, g),
        make_policy("omgpt", task, model=model, window=window),
        horizon,
        g,
        policy_generator=torch.Generator().manual_seed(9),
    )
    agent = Agent(make_policy("omgpt", task, model=model, window=window), horizon=horizon, seed=9)
    agent.reset(batch=batch)
    for t in range(horizon):
        action = agent.act(history.contexts[:, t])
        played = history.actions[:, t]
        assert torch.equal(action, played.argmax(-1) if task.discrete else played), f"step {t}"
        agent.observe(history.observations[:, t])
    if case == "window":
        assert window < horizon  # the steps past the window were played above


def test_a_loaded_agent_plays_the_shipped_model_as_the_rollout_does():
    agent = Agent.load(NEWSVENDOR, seed=3)
    task, horizon = agent.task, agent.horizon
    g = torch.Generator().manual_seed(0)
    history = rollout(
        task,
        task.sample_envs(4, g),
        make_policy("omgpt", task, model=agent.policy.model),
        horizon,
        g,
        policy_generator=torch.Generator().manual_seed(3),
    )
    agent.reset(batch=4)
    for t in range(horizon):
        assert torch.equal(agent.act(history.contexts[:, t]), history.actions[:, t]), f"step {t}"
        agent.observe(history.observations[:, t])


def test_an_agent_trained_with_a_window_keeps_it_and_may_be_given_another(tmp_path):
    path = tiny_checkpoint(tmp_path / "w.ckpt", window=3, horizon=8)
    agent = Agent.load(path)
    assert agent.policy.window == 3 and agent.horizon == 8
    agent.reset()
    for t in range(8):  # past the 3 steps the model has positions for
        agent.act(np.ones(5, np.float32))
        agent.observe(10.0)
    assert Agent.load(path, window=2).policy.window == 2


@pytest.mark.parametrize("name", ["erm", "alg-star", "fai"])
def test_a_benchmark_by_name_plays_as_in_a_rollout(name):
    task = make_episode_task("newsvendor", {"pool_size": 4} if name == "alg-star" else None, 6)
    g = torch.Generator().manual_seed(2)
    history = rollout(
        task, task.sample_envs(2, g), make_policy(name, task), 6, g, policy_generator=torch.Generator().manual_seed(5)
    )
    agent = Agent.from_policy(name, task, seed=5, horizon=6)
    agent.reset(batch=2)
    for t in range(6):
        assert torch.equal(agent.act(history.contexts[:, t]), history.actions[:, t]), f"step {t}"
        agent.observe(history.observations[:, t])


def test_the_erm_agent_plays_100_day_episodes_as_the_full_re_solve():
    """The Gymnasium example's ``erm`` agent (one episode at a time, 100 days): every order is the one
    the rollout's ERM -- the quantile regression re-solved over the whole history each day -- places."""
    task = make_episode_task("newsvendor", None, 100)
    agent = Agent.from_policy("erm", task, seed=5)
    for episode in range(3):
        g = torch.Generator().manual_seed(episode)
        policy_generator = torch.Generator().manual_seed(episode + 10)
        history = rollout(task, task.sample_envs(1, g), make_policy("erm", task), 100, g, policy_generator)
        agent.reset(seed=episode + 10)
        for t in range(100):
            assert torch.equal(agent.act(history.contexts[:, t]), history.actions[:, t]), f"episode {episode}, day {t}"
            agent.observe(history.observations[:, t])


def test_an_agent_plays_on_the_policys_threads_without_autograd_and_restores_the_callers(monkeypatch):
    """As the rollout plays them: a policy that declares ``cpu_threads`` (ERM: 1) acts and learns on at
    most that many threads -- two threads on a loaded 2-core machine made ERM's 100-day episode 12x
    slower -- and without an autograd graph; the caller's thread count is back after each call."""
    agent = Agent.from_policy("erm", "newsvendor")
    seen = []
    for name in ("act", "observe"):
        method = getattr(agent.policy, name)
        monkeypatch.setattr(
            agent.policy,
            name,
            lambda *a, _m=method: (seen.append((torch.get_num_threads(), torch.is_grad_enabled())), _m(*a))[1],
        )
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        agent.reset()
        agent.act([1.2, 0.5, 2.1, 1.0, 2.8])
        assert torch.get_num_threads() == 2
        agent.observe(14.0)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [(1, False), (1, False)]


def test_an_oracle_needs_the_environment_and_plays_a_star_with_it():
    task = make_episode_task("newsvendor", None, 4)
    oracle = Agent.from_policy("oracle", task)
    oracle.reset()
    with pytest.raises(OMGPTError, match=r"policy 'oracle' reads the hidden environment \('w'\).*reset\(envs=\.\.\.\)"):
        oracle.act(np.ones(5, np.float32))
    g = torch.Generator().manual_seed(0)
    envs = task.start(task.sample_envs(3, g), g)
    oracle.reset(envs=envs)
    x = task.sample_context(envs, 0, g)
    assert oracle.batch == 3 and torch.equal(oracle.act(x), task.optimal_action(envs, x, 0))


# --------------------------------------------------------------------------------------------------
# Forms of inputs and outputs.
def test_numbers_and_arrays_give_numpy_tensors_give_tensors_in_the_shape_they_came():
    agent = Agent.load(NEWSVENDOR)
    context = np.array([1.2, 0.5, 2.1, 1.0, 2.8], np.float32)
    agent.reset()
    one = agent.act(context)  # one episode: the action space's element
    assert isinstance(one, np.ndarray) and one.shape == (1,) and one.dtype == np.float32
    agent.observe(14.0)  # a number
    listed = agent.act(context.tolist())
    assert isinstance(listed, np.ndarray) and listed.shape == (1,)
    agent.observe(np.array([9.5]))
    batched = agent.act(torch.tensor(context[None], dtype=torch.float64))  # (1, 5): a batch of one
    assert isinstance(batched, torch.Tensor) and batched.shape == (1, 1) and batched.dtype == torch.float32
    agent.observe(torch.tensor([[11.0]]))

    agent.reset(batch=3)
    out = agent.act(np.tile(context, (3, 1)))
    assert out.shape == (3, 1) and isinstance(out, np.ndarray)
    agent.observe([14.0, 2.0, 7.5])  # (B,) for a one-number outcome

    bandit = Agent.from_policy("ucb", "mab")
    bandit.reset()
    arm = bandit.act()  # no context: an index
    assert isinstance(arm, np.integer) and 0 <= arm < 20
    bandit.observe(0.3)
    bandit.reset(batch=2)
    arms = bandit.act(torch.zeros(2, 0))
    assert arms.dtype == torch.long and arms.shape == (2,)


def test_observing_another_action_than_the_one_chosen_is_what_the_policy_learns_from():
    """``observe(o, action=i)``: the policy conditions on the arm played, as when it is driven directly."""
    task = make_episode_task("mab", None, 5)
    model = tiny_model(task, 5)
    g = torch.Generator().manual_seed(0)
    played, outcomes = torch.randint(20, (5,), generator=g), torch.randn(5, 1, generator=g)
    policy = make_policy("omgpt", task, model=model)
    policy.reset({"r": torch.zeros(1, 20)}, 5, torch.Generator().manual_seed(1))
    agent = Agent(make_policy("omgpt", task, model=model), horizon=5, seed=1)
    agent.reset()
    for t in range(5):
        x = torch.zeros(1, 0)
        assert agent.act() == int(task.project(policy.act(t, x), x).argmax())
        policy.observe(t, task.one_hot(played[t : t + 1]), outcomes[t : t + 1])
        agent.observe(float(outcomes[t]), action=int(played[t]))
    assert torch.equal(agent.policy.actions, policy.actions) and agent.policy.actions.argmax(-1).tolist() == [
        played.tolist()
    ]


# --------------------------------------------------------------------------------------------------
# Misuse is one line.
def _misuse(case: str):
    agent = Agent.load(NEWSVENDOR)
    context = np.ones(5, np.float32)
    if case == "act before reset":
        return lambda: agent.act(context)
    if case == "horizon past max_steps without a window":
        return lambda: agent.reset(horizon=101)
    if case == "a window past max_steps":
        return lambda: Agent.load(NEWSVENDOR, window=120).reset(horizon=150)
    agent.reset(batch=1, horizon=2)
    if case == "observe before act":
        return lambda: agent.observe(3.0)
    if case == "wrong context shape":
        return lambda: agent.act(np.ones(4))
    if case == "a batch context for one episode":
        return lambda: agent.act(np.ones((2, 5)))
    if case == "non-finite context":
        return lambda: agent.act([1.0, np.nan, 1.0, 1.0, 1.0])
    if case == "text context":
        return lambda: agent.act("monday")
    agent.act(context)
    if case == "act twice":
        return lambda: agent.act(context)
    if case == "wrong outcome shape":
        return lambda: agent.observe([1.0, 2.0])
    if case == "missing outcome":
        return lambda: agent.observe(None)
    agent.observe(3.0)
    agent.act(context)
    agent.observe(3.0)
    assert case == "act past the episode"
    return lambda: agent.act(context)


MISUSE = {
    "act before reset": "act() before reset()",
    "horizon past max_steps without a window": "horizon 101 exceeds the model's max_steps=100; use a window",
    "a window past max_steps": "window 120 exceeds the model's max_steps=100",
    "observe before act": "observe() before act()",
    "wrong context shape": "the context has shape (4,): expected (1, 5) for 1 episode(s), or (5,) for the one episode",
    "a batch context for one episode": "the context has shape (2, 5)",
    "non-finite context": "the context holds non-finite numbers",
    "text context": "the context must be numbers, got str",
    "act twice": "act() twice at step 1: call agent.observe(outcome)",
    "wrong outcome shape": "the outcome has shape (2,)",
    "missing outcome": "the outcome is missing",
    "act past the episode": "the episode's 2 steps are played",
}


@pytest.mark.parametrize("case", list(MISUSE))
def test_misuse_is_one_line(case):
    with pytest.raises(OMGPTError) as error:
        _misuse(case)()
    assert MISUSE[case] in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_bad_settings_are_one_line():
    for build, message in [
        (lambda: Agent.from_policy("ucb", "newsvendor"), "policy 'ucb' does not apply to task 'newsvendor'"),
        (lambda: Agent.from_policy("erm", "newsvendor", horizon=0), "horizon must be"),
        (lambda: Agent.load(NEWSVENDOR, window=0), "window must be"),
        (lambda: Agent.load(NEWSVENDOR, seed=-1), "seed"),
        (lambda: Agent.from_policy("erm", "newsvendor").reset(batch=0), "batch must be"),
    ]:
        with pytest.raises(OMGPTError, match=message):
            build()


def test_omgpt_exports_the_agent_and_load_model():
    assert omgpt.Agent is Agent and omgpt.load_model is load_model
    assert {"Agent", "load_model"} <= set(dir(omgpt))
