"""The Gymnasium environments over a task: one episode (:class:`OMGPTEnv`) or a batch of them through the
task's batched simulator (:class:`OMGPTVectorEnv`); both step :class:`Episodes`, the rollout's loop body.

Observation: ``{"context": X_t, "outcome": O_{t-1}}`` (float32; ``O_{-1} = 0`` at the first step, as
the model reads it). The observation returned with the last step has no ``X_T`` to show: its context
is zeros.

Action: the task's. A ``Discrete(k)`` index for discrete tasks (the bandit's one-hot actions are
converted both ways), else the ``Box`` ``A = [action_low, action_high]^action_dim``. Every action is
projected onto the task's action set given the context before it is played
(:meth:`~omgpt.tasks.base.Task.project`, as the rollout does): onto the unit ball for the linear
bandit, the 0.2-grid of ``[0, 1]`` for queueing's service rate (a continuous scalar the task rounds),
and ``[I_t, I_t + 30]`` for the non-perishable newsvendor's order-up-to level -- the one task whose
feasible actions leave the box, by the inventory ``I_t`` (its context's first number).

Reward: the expected reward of the played action given ``X_t`` and the hidden environment,
:meth:`~omgpt.tasks.base.Task.expected_reward` (not the realised one, which is noisier and which
several tasks do not define), the reward the rollout records. ``info``: ``"optimal_action"`` ``a*_t``
(in the action space's form), ``"regret"`` this step's regret against the oracle exactly as the rollout
records it (:meth:`~omgpt.tasks.base.Task.optimal_reward` minus the reward, in the contexts' dtype:
summed over an episode it is :meth:`~omgpt.rollout.History.cumulative_regret`), ``"outcome"`` ``O_t``.
Episodes never terminate; they are truncated at the horizon.

Seeding (how the environment maps to :func:`omgpt.rollout.rollout`). ``reset(seed=s)`` seeds one
``torch.Generator`` ``g`` with ``s``; it draws the environments (``task.sample_envs(B, g)``), starts
them (``task.start``) and drives every context and outcome, in the rollout's order. So ``B`` episodes
from ``reset(seed=s)`` are exactly::

    g = torch.Generator().manual_seed(s)
    rollout(task, task.sample_envs(B, g), policy, horizon, g, policy_generator=torch.Generator().manual_seed(a))

played by an :class:`omgpt.Agent` of seed ``a`` -- the policy's randomness is the agent's, never the
environment's (rollout's default ``policy_generator`` would draw its seed from ``g`` first). ``reset()``
without a seed continues the same generator: the next episodes follow on, as Gymnasium expects; the
first unseeded reset seeds it from Gymnasium's ``np_random``. The vector environment draws its ``B``
episodes as one batch from one seed, as the rollout does (``reset(seed=s)`` with ``B = 1`` is the single
environment's ``reset(seed=s)``); after the last step it resets them all on the next ``step`` (Gymnasium's
next-step autoreset: every episode ends at the same step).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from torch import Tensor

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.tasks import TASKS, Task, make_episode_task, make_task
from omgpt.tasks.base import Envs, step_regret


def action_space(task: Task) -> spaces.Space:
    """``Discrete(k)`` for a discrete task's ``k`` actions, else the box ``A`` (see the module docstring)."""
    if task.discrete:
        return spaces.Discrete(task.action_dim)
    return spaces.Box(task.action_low, task.action_high, (task.action_dim,), np.float32)


def observation_space(task: Task) -> spaces.Dict:
    """``{"context": X_t, "outcome": O_{t-1}}``, unbounded float32 boxes (the bandits' context is empty)."""
    box = lambda dim: spaces.Box(-np.inf, np.inf, (dim,), np.float32)  # noqa: E731
    return spaces.Dict({"context": box(task.context_dim), "outcome": box(task.obs_dim)})


def episode_task(task: str | Task, horizon: int | None, options: dict) -> tuple[Task, int]:
    """The task an environment plays and its horizon (default: the task class's, e.g. 50 for revenue).
    A task name is built with ``options`` for episodes of that horizon, as
    :func:`~omgpt.tasks.make_episode_task` builds it for a rollout (queueing's DP, revenue's budget);
    a :class:`Task` is played as it is."""
    if isinstance(task, Task):
        if options:
            raise OMGPTError(f"task options ({', '.join(options)}) go with a task name, not a built task")
        return task, checks.number("horizon", task.horizon if horizon is None else horizon, integer=True, low=1)
    if task not in TASKS:
        make_task(task)  # the one-line "unknown task" error
    horizon = checks.number(
        "horizon", TASKS[task].cls.default_horizon if horizon is None else horizon, integer=True, low=1
    )
    return make_episode_task(task, options, horizon), horizon


class Step(NamedTuple):
    """What one step of a batch of episodes gave, each ``(B, ...)``."""

    action: Tensor  # a_t as played (projected onto the action set)
    outcome: Tensor  # O_t
    reward: Tensor  # r(X_t, a_t), the expected reward
    optimal_action: Tensor  # a*_t
    regret: Tensor  # optimal reward - reward, as the rollout records it


class Episodes:
    """``B`` episodes of a task played one decision at a time: the body of
    :func:`omgpt.rollout.rollout`'s loop, split where the policy acts, with the same calls to the task
    and its generator in the same order (``sample_envs``, ``start``; per step ``sample_context``, then,
    given the action, ``project``, ``optimal_action``, ``observe``, the rewards, ``step``). That order is
    what makes a played episode the rollout's, bit for bit (tests/test_envs.py checks it on every task)."""

    def __init__(self, task: Task, horizon: int):
        self.task, self.horizon = task, horizon
        self.envs: Envs | None = None  # the started environments, their state advanced by task.step
        self.t = 0  # the step the next action is for
        self.x: Tensor | None = None  # its context X_t; None once the episodes are over

    def reset(self, n: int, generator: torch.Generator) -> Tensor:
        """Draw and start ``n`` episodes; returns ``X_0`` ``(n, context_dim)``."""
        task, self.generator = self.task, generator
        self.envs = task.start(task.sample_envs(n, generator), generator)
        self.t = 0
        self.x = task.sample_context(self.envs, 0, generator)
        return self.x

    def step(self, actions: Tensor) -> Step:
        """Play ``actions`` ``(B, action_dim)`` at the current step; the next context is drawn unless
        that was the last step."""
        if self.x is None:
            raise OMGPTError(
                "the episode is over (truncated at its horizon): reset() the environment"
                if self.envs is not None
                else "step() before reset(): reset() the environment first"
            )
        task, envs, x, t, g = self.task, self.envs, self.x, self.t, self.generator
        a = task.project(actions.to(device=x.device, dtype=x.dtype), x)
        a_star = task.optimal_action(envs, x, t)
        o = task.observe(envs, x, a, t, g)
        reward, best = task.expected_reward(envs, x, a, t), task.optimal_reward(envs, x, t, a_star)
        regret = step_regret(best, reward, x.dtype)
        task.step(envs, x, a, o, t)
        self.t = t + 1
        self.x = task.sample_context(envs, self.t, g) if self.t < self.horizon else None
        return Step(a, o, reward, a_star, regret)


# --------------------------------------------------------------------------------------------------
# What the two environments share: seeding and the conversions between tensors and Gymnasium's values.
def _generator(
    seed: int | None, np_random: np.random.Generator, device: torch.device, current: torch.Generator | None
) -> torch.Generator:
    """The task's generator for the episodes a ``reset(seed=seed)`` starts (see the module docstring).
    Gymnasium takes any non-negative integer as a seed; torch's generator takes 64 bits: a larger seed is
    hashed into them (numpy's ``SeedSequence``), a smaller one is the generator's seed itself."""
    if seed is not None:
        seed = int(seed)
        if seed >= 2**64:
            seed = int(np.random.SeedSequence(seed).generate_state(1, np.uint64)[0])
        return torch.Generator(device).manual_seed(seed)
    if current is not None:
        return current
    return torch.Generator(device).manual_seed(int(np_random.integers(2**63 - 1)))


def _numpy(t: Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().copy()  # a copy: nothing returned shares memory with the episodes' state


def _observations(task: Task, x: Tensor | None, o: Tensor) -> dict[str, np.ndarray]:
    """``{"context": (B, context_dim), "outcome": (B, obs_dim)}``; after the last step, zero contexts."""
    context = np.zeros((o.shape[0], task.context_dim), np.float32) if x is None else _numpy(x).astype(np.float32)
    return {"context": context, "outcome": _numpy(o).astype(np.float32)}


def _to_actions(task: Task, action: Any, n: int, device: torch.device) -> Tensor:
    """Gymnasium actions of ``n`` episodes -> ``(n, action_dim)``: indices become one-hot vectors."""
    value = np.asarray(action.cpu() if isinstance(action, Tensor) else action)
    if task.discrete:
        k = task.action_dim
        if value.size != n or not np.issubdtype(value.dtype, np.integer) or ((value < 0) | (value >= k)).any():
            raise OMGPTError(f"the action must be {n} index(es) in 0..{k - 1}, got {action!r}")
        return F.one_hot(torch.as_tensor(value.reshape(n), dtype=torch.long), k).to(device, torch.get_default_dtype())
    if value.size != n * task.action_dim or not np.issubdtype(value.dtype, np.number):
        raise OMGPTError(f"the action must be {n} x {task.action_dim} number(s), got {action!r}")
    # a NaN would be played into a NaN reward; a huge one is no order a task can compute with (float32)
    return checks.inputs("action", torch.as_tensor(value.astype(np.float32).reshape(n, task.action_dim), device=device))


def _no_render(render_mode: str | None) -> None:
    """Gymnasium's ``render_mode=``: these environments draw nothing, so ``None`` only (not a task option)."""
    if render_mode is not None:
        raise OMGPTError(f"render_mode {render_mode!r}: omgpt environments render nothing (render_mode=None only)")


def _no_options(options: dict | None) -> None:
    """``reset(options=...)``: nothing here reads them, so they are refused rather than ignored."""
    if options:
        raise OMGPTError(
            f"reset(options={options!r}): omgpt environments take no reset options; "
            f"task options go to gymnasium.make(..., **options), before the first reset"
        )


def _from_actions(task: Task, a: Tensor) -> np.ndarray:
    """``(B, action_dim)`` -> Gymnasium actions: ``(B,)`` indices, or ``(B, action_dim)`` float32."""
    return _numpy(a.argmax(-1)) if task.discrete else _numpy(a).astype(np.float32)


# --------------------------------------------------------------------------------------------------
class OMGPTEnv(gym.Env):
    """One episode at a time of a task: ``gymnasium.make("omgpt/<task>-v0", horizon=..., **task_options)``.

    Args:
        task: a task name (``omgpt.tasks.TASKS``) or a built :class:`~omgpt.tasks.Task`.
        horizon: the episode length ``T`` (default: the task class's horizon); given to the tasks with
            a ``horizon`` option as :func:`~omgpt.tasks.make_episode_task` does.
        device: where the simulator runs.
        task_options: the task's options (``dim``, ``pool_size``, ``noise_std``, ...).

    ``env.unwrapped.envs`` is the hidden environment of the current episode (batch 1), for the oracles
    (``Agent.reset(envs=...)``) and for analysis.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        task: str | Task,
        horizon: int | None = None,
        device: str = "cpu",
        render_mode: str | None = None,
        **task_options: Any,
    ):
        _no_render(render_mode)
        self.task, self.horizon = episode_task(task, horizon, task_options)
        self.device = checks.device(str(device), "device")
        self.action_space = action_space(self.task)
        self.observation_space = observation_space(self.task)
        self.episodes = Episodes(self.task, self.horizon)
        self._generator: torch.Generator | None = None

    @property
    def envs(self) -> Envs | None:
        return self.episodes.envs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        _no_options(options)
        super().reset(seed=seed)
        self._generator = _generator(seed, self.np_random, self.device, self._generator)
        x = self.episodes.reset(1, self._generator)
        no_outcome = torch.zeros(1, self.task.obs_dim)
        return {k: v[0] for k, v in _observations(self.task, x, no_outcome).items()}, {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        s = self.episodes.step(_to_actions(self.task, action, 1, self.device))
        obs = {k: v[0] for k, v in _observations(self.task, self.episodes.x, s.outcome).items()}
        info = {
            "optimal_action": _from_actions(self.task, s.optimal_action)[0],
            "regret": float(s.regret[0]),
            "outcome": _numpy(s.outcome[0]).astype(np.float32),
        }
        return obs, float(s.reward[0]), False, self.episodes.x is None, info


class OMGPTVectorEnv(VectorEnv):
    """``num_envs`` episodes of a task stepped together by its batched simulator:
    ``gymnasium.make_vec("omgpt/<task>-v0", num_envs=N, vectorization_mode="vector_entry_point")``.
    Arguments as :class:`OMGPTEnv`; ``reset(seed=s)`` takes one integer, which seeds the whole batch
    (see the module docstring). ``info`` holds ``(N, ...)`` arrays, with Gymnasium's ``_key`` masks."""

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        task: str | Task,
        num_envs: int = 1,
        horizon: int | None = None,
        device: str = "cpu",
        render_mode: str | None = None,
        **task_options: Any,
    ):
        _no_render(render_mode)
        self.num_envs = checks.number("num_envs", num_envs, integer=True, low=1)
        self.task, self.horizon = episode_task(task, horizon, task_options)
        self.device = checks.device(str(device), "device")
        self.single_action_space = action_space(self.task)
        self.single_observation_space = observation_space(self.task)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.episodes = Episodes(self.task, self.horizon)
        self._generator: torch.Generator | None = None
        self._autoreset = False  # the episodes ended at the last step: the next step() starts new ones

    @property
    def envs(self) -> Envs | None:
        return self.episodes.envs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise OMGPTError(
                f"one integer seeds the whole batch of episodes (the task draws them as one), got {seed!r}"
            )
        _no_options(options)
        super().reset(seed=seed)
        self._generator = _generator(seed, self.np_random, self.device, self._generator)
        x = self.episodes.reset(self.num_envs, self._generator)
        self._autoreset = False
        return _observations(self.task, x, torch.zeros(self.num_envs, self.task.obs_dim)), {}

    def step(self, actions: Any) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        n = self.num_envs
        if self._autoreset:
            obs, info = self.reset()
            return obs, np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), info
        s = self.episodes.step(_to_actions(self.task, actions, n, self.device))
        self._autoreset = self.episodes.x is None
        every = np.ones(n, bool)
        info = {
            "optimal_action": _from_actions(self.task, s.optimal_action),
            "_optimal_action": every.copy(),
            "regret": _numpy(s.regret),
            "_regret": every.copy(),
            "outcome": _numpy(s.outcome).astype(np.float32),
            "_outcome": every.copy(),
        }
        rewards = _numpy(s.reward).astype(np.float64)
        return (
            _observations(self.task, self.episodes.x, s.outcome),
            rewards,
            np.zeros(n, bool),
            np.full(n, self._autoreset),
            info,
        )
