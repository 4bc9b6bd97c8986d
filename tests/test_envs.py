"""Gymnasium environments for every task (issue 26): ``gymnasium.make("omgpt/<task>-v0")``.

* every registered task passes Gymnasium's ``check_env``, with no warning but the two about its spaces
  that are by design (unbounded observations, actions in the task's own units);
* an agent playing through the environment meets the rollout's episodes exactly -- contexts, actions,
  outcomes and every step's regret, so the final regret -- on every task, single and batched;
* options, horizons, seeds, autoreset, discrete actions and bad actions behave as documented;
* the example and docs/agent-gymnasium.md run as written.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import omgpt  # noqa: F401  (importing omgpt registers the environments)
from omgpt import Agent
from omgpt.envs import OMGPTEnv, OMGPTVectorEnv, env_id, register_envs
from omgpt.errors import OMGPTError
from omgpt.model import ModelConfig, NetworkConfig, build_model
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
NEWSVENDOR = ROOT / "pretrained" / "newsvendor"
BY_DESIGN = (
    "observation space minimum value is -infinity",
    "observation space maximum value is infinity",
    "recommend using a symmetric and normalized space",
)


def checked(env) -> None:
    """``check_env`` on the environment ``gymnasium.make`` gave (unwrapped, as check_env asks: it keeps
    the spec), failing on any warning but those by design."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    unexpected = [str(w.message) for w in caught if not any(s in str(w.message) for s in BY_DESIGN)]
    assert not unexpected, unexpected


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_passes_check_env(name):
    env = gymnasium.make(env_id(name))
    checked(env)
    assert isinstance(env.unwrapped, OMGPTEnv) and env.unwrapped.spec.id == env_id(name)


def test_importing_omgpt_registers_every_task_and_a_task_added_later_on_request():
    assert all(
        env_id(name) in gymnasium.registry for name in TASKS if name != "logit-pricing"
    )  # the example registers later
    if "logit-pricing" not in TASKS:  # tests/test_example_task.py may have imported it already
        import examples.logit_pricing  # noqa: F401  (a task file of one's own, registered after omgpt)

    register_envs()
    assert register_envs() == []  # idempotent
    checked(gymnasium.make("omgpt/logit-pricing-v0"))


# --------------------------------------------------------------------------------------------------
# Playing through the environment is the rollout.
def play(env, agent: Agent, seed: int) -> dict[str, np.ndarray]:
    """One episode (or one batch of them) of ``agent`` on ``env`` from ``reset(seed=seed)``, recorded
    step by step: each entry ``(T, ...)``."""
    obs, _ = env.reset(seed=seed)
    agent.reset(batch=getattr(env.unwrapped, "num_envs", 1))
    record = {"contexts": [], "actions": [], "outcomes": [], "regrets": [], "rewards": []}
    truncated = False
    while not np.all(truncated):
        record["contexts"].append(obs["context"])
        action = agent.act(obs["context"])
        obs, reward, terminated, truncated, info = env.step(action)
        assert not np.any(terminated)
        agent.observe(info["outcome"])
        for key, value in zip(
            ("actions", "outcomes", "regrets", "rewards"), (action, info["outcome"], info["regret"], reward)
        ):
            record[key].append(value)
    return {k: np.stack([np.asarray(v) for v in values]) for k, values in record.items()}


def reference(task, policy, horizon: int, batch: int, seed: int, agent_seed: int):
    """The rollout an environment seeded with ``seed`` and an agent seeded with ``agent_seed`` play."""
    g = torch.Generator().manual_seed(seed)
    return rollout(
        task, task.sample_envs(batch, g), policy, horizon, g, policy_generator=torch.Generator().manual_seed(agent_seed)
    )


def assert_same_episodes(played: dict, history) -> None:
    """The episodes played are the rollout's: every context, action, outcome, reward and regret."""
    expected = {
        "contexts": history.contexts,
        "outcomes": history.observations,
        "regrets": history.regrets,
        "rewards": history.rewards,
        "actions": history.actions.argmax(-1) if played["actions"].dtype.kind == "i" else history.actions,
    }
    for key, value in expected.items():
        value = np.moveaxis(value.numpy(), 1, 0)  # (T, B, ...)
        value = value[:, 0] if played[key].ndim < value.ndim else value  # a single environment's
        assert (
            np.array_equal(played[key], value.astype(played[key].dtype)) and value.dtype.kind == played[key].dtype.kind
        ), key


@pytest.mark.parametrize("name", sorted(TASKS))
def test_omgpt_through_the_environment_meets_the_rollout_on_every_task(name):
    env = gymnasium.make(env_id(name), horizon=5)
    task = env.unwrapped.task
    torch.manual_seed(0)
    model = build_model(
        ModelConfig.build(NetworkConfig(n_layer=1, n_head=2, n_embd=8), task, max_steps=5),
        task.scaling(),
    )
    agent = Agent(make_policy("omgpt", task, model=model), horizon=5, seed=11)
    played = play(env, agent, seed=3)
    history = reference(task, make_policy("omgpt", task, model=model), 5, 1, seed=3, agent_seed=11)
    assert_same_episodes(played, history)


def test_the_shipped_model_through_the_environment_has_the_rollouts_final_regret():
    env = gymnasium.make("omgpt/newsvendor-v0")
    agent = Agent.load(NEWSVENDOR, seed=1)
    for seed in (0, 1):
        played = play(env, agent, seed)
        history = reference(env.unwrapped.task, agent.policy, 100, 1, seed, agent_seed=1)
        assert_same_episodes(played, history)
        assert torch.tensor(played["regrets"], dtype=torch.float32).cumsum(0)[-1] == history.cumulative_regret()[0, -1]


@pytest.mark.parametrize("name", ["newsvendor", "mab", "queueing", "revenue"])
def test_the_vector_environment_is_the_batched_rollout(name):
    env = gymnasium.make_vec(env_id(name), num_envs=4, vectorization_mode="vector_entry_point", horizon=4)
    assert isinstance(env.unwrapped, OMGPTVectorEnv)
    task = env.unwrapped.task
    agent = Agent.from_policy("random", task, seed=6, horizon=4)
    played = play(env, agent, seed=8)
    history = reference(task, make_policy("random", task), 4, 4, seed=8, agent_seed=6)
    assert_same_episodes(played, history)
    # one environment of a batch of one is the single environment
    single = gymnasium.make(env_id(name), horizon=4).unwrapped
    batch_of_one = OMGPTVectorEnv(name, num_envs=1, horizon=4)
    assert all(
        np.array_equal(a, b[0])
        for a, b in zip(single.reset(seed=2)[0].values(), batch_of_one.reset(seed=2)[0].values())
    )


def test_the_vector_environment_resets_on_the_step_after_the_last():
    env = OMGPTVectorEnv("newsvendor", num_envs=3, horizon=2)
    env.reset(seed=0)
    actions = np.full((3, 1), 10.0, np.float32)
    env.step(actions)
    obs, rewards, terminated, truncated, info = env.step(actions)
    assert truncated.all() and not terminated.any() and set(info) >= {"regret", "_regret", "optimal_action", "outcome"}
    assert (obs["context"] == 0).all()  # no X_T
    obs, rewards, terminated, truncated, info = env.step(actions)  # next-step autoreset
    assert not truncated.any() and (rewards == 0).all() and (obs["outcome"] == 0).all() and (obs["context"] != 0).any()
    assert env.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.NEXT_STEP
    with pytest.raises(OMGPTError, match="one integer seeds the whole batch"):
        env.reset(seed=[1, 2, 3])


# --------------------------------------------------------------------------------------------------
# What the environment shows and takes.
def test_an_episode_observes_contexts_and_last_outcomes_and_truncates_at_the_horizon():
    env = gymnasium.make("omgpt/newsvendor-v0", horizon=3)
    obs, info = env.reset(seed=0)
    assert info == {} and (obs["outcome"] == 0).all() and obs["context"].shape == (5,)
    steps = 0
    truncated = False
    while not truncated:
        obs_next, reward, terminated, truncated, info = env.step(np.array([12.0], np.float32))
        steps += 1
        assert not terminated and np.array_equal(obs_next["outcome"], info["outcome"])
        assert info["regret"] >= 0 and isinstance(reward, float) and info["optimal_action"].shape == (1,)
    assert steps == 3
    with pytest.raises(OMGPTError, match="the episode is over"):
        env.step(np.array([12.0], np.float32))


def test_task_options_reach_the_task_and_bad_ones_are_one_line():
    env = gymnasium.make("omgpt/newsvendor-v0", pool_size=2, dim=2, horizon=7).unwrapped
    assert env.horizon == 7 and env.task.pool_size == 2 and env.task.dim == 2 and env.task.horizon == 7
    env.reset(seed=0)
    assert any(torch.equal(env.envs["w"][0], w) for w in env.task.pool["w"])  # drawn from the pool
    assert gymnasium.make("omgpt/revenue-v0").unwrapped.horizon == 50  # the task class's horizon
    assert gymnasium.make("omgpt/queueing-v0", horizon=9).unwrapped.task.horizon == 9  # its DP plans for the episode
    for options, message in [
        ({"colour": 1}, "task 'newsvendor' has no option 'colour'"),
        ({"horizon": 0}, "horizon must be"),
    ]:
        with pytest.raises(OMGPTError, match=message):
            gymnasium.make("omgpt/newsvendor-v0", **options)


def test_reset_without_a_seed_continues_the_seeded_stream():
    a, b = (gymnasium.make("omgpt/pricing-v0") for _ in range(2))
    first = a.reset(seed=5)[0]["context"]
    second = a.reset()[0]["context"]
    assert np.array_equal(b.reset(seed=5)[0]["context"], first) and np.array_equal(b.reset()[0]["context"], second)
    assert not np.array_equal(first, second)


def test_a_bandit_plays_arm_indices():
    env = gymnasium.make("omgpt/mab-v0").unwrapped
    assert isinstance(env.action_space, gymnasium.spaces.Discrete) and env.action_space.n == 20
    assert env.observation_space["context"].shape == (0,)
    env.reset(seed=0)
    r = env.envs["r"][0]
    _, reward, _, _, info = env.step(3)
    assert info["optimal_action"] == int(r.argmax()) and reward == pytest.approx(float(r[3]))
    assert info["regret"] == pytest.approx(float(r.max() - r[3]))


@pytest.mark.parametrize(
    "name, action, message",
    [
        ("newsvendor", np.array([1.0, 2.0]), r"the action must be 1 x 1 number\(s\)"),
        ("newsvendor", "ten", r"the action must be 1 x 1 number\(s\)"),
        ("mab", 20, r"the action must be 1 index\(es\) in 0..19"),
        ("mab", 2.5, r"the action must be 1 index\(es\) in 0..19"),
    ],
)
def test_a_bad_action_is_one_line(name, action, message):
    env = gymnasium.make(env_id(name)).unwrapped
    with pytest.raises(OMGPTError, match="step\\(\\) before reset\\(\\)"):
        env.step(env.action_space.sample())
    env.reset(seed=0)
    with pytest.raises(OMGPTError, match=message):
        env.step(action)


def test_an_oracle_agent_reads_the_environment_it_is_given():
    env = gymnasium.make("omgpt/newsvendor-nonperishable-v0", horizon=10)
    oracle = Agent.from_policy("oracle", env.unwrapped.task, horizon=10)
    obs, _ = env.reset(seed=0)
    oracle.reset(envs=env.unwrapped.envs)  # the episode's hidden environment, its inventory updated as it is played
    truncated, regret = False, 0.0
    while not truncated:
        obs, _, _, truncated, info = env.step(oracle.act(obs["context"]))
        oracle.observe(info["outcome"])
        regret += info["regret"]
    assert regret == 0.0


# --------------------------------------------------------------------------------------------------
# The example and its page, docs/agent-gymnasium.md.
def test_the_example_plays_three_agents(capsys):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import gymnasium_agent
    finally:
        sys.path.remove(str(ROOT / "examples"))
    finals = gymnasium_agent.main(["--episodes", "2"])
    assert list(finals) == ["omgpt", "alg-star", "erm"] and all(len(f) == 2 for f in finals.values())
    out = capsys.readouterr().out
    assert "2 episodes of omgpt/newsvendor-v0" in out and all(name in out for name in finals)


SECTION = (ROOT / "docs" / "agent-gymnasium.md").read_text()


def test_the_readme_sections_python_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", SECTION, re.S)
    assert len(blocks) >= 2
    code = "\n".join(blocks)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_the_readme_sections_commands_run_as_written():
    commands = [
        line.split("  #")[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", SECTION, re.S)
        for line in block.splitlines()
    ]
    assert commands
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (command, done.stderr[-3000:])
        assert "final regret" in done.stdout
