"""The one batched rollout loop, the History it produces, and what derives from a history.

Every history in the project -- pre-training data, evaluation of OMGPT and of every benchmark,
validation, probing -- comes from :func:`rollout`: ``B`` environments played for ``T`` steps against a
policy. Policies share one small interface (:class:`omgpt.policies.Policy`).

What depends on the state an episode was in (rewards, optimal rewards, regrets) is recorded by the
rollout at the step it is played, never recomputed afterwards from :attr:`History.envs`, which holds
the episode's *final* state on stateful tasks (inventory, queue, budget). :func:`tokens_at` is the one
builder of the model's input tokens (training, OMGPT as a policy, evaluation, analysis), and
:func:`replay` lets any policy decide along a recorded history.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch
from torch import Tensor

from omgpt import checks, threads
from omgpt.tasks.base import Envs, step_regret, Task


@dataclass
class History:
    """A batch of played episodes, all tensors batch-first.

    Attributes:
        contexts: ``X_t``, ``(B, T, context_dim)``.
        actions: ``a_t`` as played (after projection onto ``A``), ``(B, T, action_dim)``.
        observations: ``O_t``, ``(B, T, obs_dim)``.
        optimal_actions: ``a*_t``, ``(B, T, action_dim)`` -- the pre-training targets.
        regrets: per-step pseudo-regret ``optimal_rewards - rewards``, ``(B, T)``.
        suboptimality: ``|a*_t - a_t|``, ``(B, T)``.
        rewards: ``r(X_t, a_t)``, the expected reward of the played action in the state the step was
            played in, ``(B, T)``.
        optimal_rewards: what the regret measures against, ``Task.optimal_reward`` in that state
            (``r(X_t, a*_t)``; on queueing and revenue management the whole optimal policy's), ``(B, T)``.
        envs: the environments (for probing and posterior oracles); on stateful tasks they hold the
            state at the end of the episode.
    """

    contexts: Tensor
    actions: Tensor
    observations: Tensor
    optimal_actions: Tensor
    regrets: Tensor
    suboptimality: Tensor
    rewards: Tensor
    optimal_rewards: Tensor
    envs: Envs = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        return self.contexts.shape[1]

    def features(self) -> Tensor:
        """Feature tokens ``(O_{t-1}, X_t)`` with ``O_0 = 0``, shape ``(B, T, obs_dim + context_dim)``."""
        return self.tokens()[0]

    def tokens(self, window: int | None = None, t: int | None = None, restart: bool = False) -> tuple[Tensor, Tensor]:
        """The tokens the model reads at step ``t`` (default: the last), :func:`tokens_at`."""
        return tokens_at(
            self.contexts, self.actions, self.observations, self.horizon - 1 if t is None else t, window, restart
        )

    def apply(self, f) -> "History":
        """A History of ``f`` applied to every ``(B, T, ...)`` tensor (``envs`` left as they are)."""
        return History(**{k.name: f(getattr(self, k.name)) for k in fields(self) if k.name != "envs"}, envs=self.envs)

    def truncate(self, horizon: int) -> "History":
        """The first ``horizon`` steps (the curriculum trains on truncated histories)."""
        return self.apply(lambda v: v[:, :horizon])

    def to(self, device) -> "History":
        moved = self.apply(lambda v: v.to(device))
        moved.envs = {k: v.to(device) for k, v in self.envs.items()}
        return moved

    @staticmethod
    def cat(parts: list["History"]) -> "History":
        """Histories of the same horizon, one after the other along the batch."""
        joined = {k.name: torch.cat([getattr(p, k.name) for p in parts]) for k in fields(History) if k.name != "envs"}
        return History(**joined, envs={k: torch.cat([p.envs[k] for p in parts]) for k in parts[0].envs})

    def cumulative_regret(self) -> Tensor:
        """``Σ_{s≤t} regret_s``, shape ``(B, T)``."""
        return self.regrets.cumsum(dim=1)


def mean_observations(task: Task, history: History) -> Tensor:
    """``E[O_t | γ, X_t, a_t]`` at every step, ``(B, T, obs_dim)`` (the expected demand a pricing model
    predicts): :meth:`Task.mean_observation` of the history's environments, which must see the
    episode's state through the context alone (``History.envs`` hold the final state)."""
    return torch.stack(
        [
            task.mean_observation(history.envs, history.contexts[:, t], history.actions[:, t], t)
            for t in range(history.horizon)
        ],
        dim=1,
    )


def tokens_at(
    contexts: Tensor, actions: Tensor, observations: Tensor, t: int, window: int | None = None, restart: bool = False
) -> tuple[Tensor, Tensor]:
    """The model's input when it decides at step ``t`` (0-based): ``(features, actions)`` of the steps
    ``max(0, t + 1 - W) .. t`` (all of ``0 .. t`` without a ``window`` ``W``), each ``(B, L, ·)``.

    The feature token of step ``s`` is ``(O_{s-1}, X_s)`` with ``O_{-1} = 0``; the model interleaves
    them with the actions as ``(O_0,X_1), a_1, (O_1,X_2), a_2, …`` and its read-out at feature token
    ``s`` predicts ``a*_s`` from the tokens up to it (docs/paper-gaps.md §1). In a window the first feature token
    carries the observation of the step before the window, as it should. ``a_t`` (the last action
    token) is only read by the observation head; ``observations[:, t]`` is never read, so a policy
    may call this before it has seen ``O_t``. The one token builder of training, OMGPT as a policy
    (windowed or cached), evaluation and analysis.

    ``restart=True`` reads a window that begins after step 0 as a history of its own: its first
    observation is zeroed, as ``O_{-1}`` is at an episode's start. That is what a model trained on
    whole histories has seen at position 0 (and what a windowed training slice feeds it,
    ``OMGPTModule.window_slice``); the observation of the step before the window is one sample lost.
    Measured on the uncensored reference newsvendor at T = 200, W = 100: 12.3 with it against 55.1
    without (40 runs), the model's action error jumping from 0.21 to 0.93 at the first windowed step."""
    lo = 0 if window is None else max(0, t + 1 - window)
    prev = (
        observations[:, lo - 1 : t]
        if lo > 0
        else torch.cat([torch.zeros_like(observations[:, :1]), observations[:, :t]], dim=1)
    )
    features = torch.cat([prev, contexts[:, lo : t + 1]], dim=-1)
    return (restarted(features, observations.shape[-1]) if restart and lo > 0 else features), actions[:, lo : t + 1]


def restarted(features: Tensor, obs_dim: int) -> Tensor:
    """Feature tokens ``(B, L, ·)`` of a slice of a history read as a history of its own: the first
    token's observation columns zeroed, as ``O_{-1}`` is at an episode's start (:func:`tokens_at`'s
    ``restart``, and the windowed training slices of ``OMGPTModule.window_slice``)."""
    features = features.clone()
    features[:, 0, :obs_dim] = 0.0
    return features


def rollout(
    task: Task,
    envs: Envs,
    policy,
    horizon: int,
    generator: torch.Generator,
    policy_generator: torch.Generator | None = None,
    differentiable: bool = False,
) -> History:
    """Play ``horizon`` steps of every environment in ``envs`` with ``policy``.

    ``generator`` drives the task (contexts, observation noise) and ``policy_generator`` the policy's
    own randomness. Keeping them apart gives common random numbers: two policies run with the same
    seeds face exactly the same contexts and demand shocks, so their regret curves differ only by
    their decisions.

    ``differentiable=True`` records the autograd graph (no grad otherwise): the regret objective's
    pathwise gradient (:meth:`omgpt.module.OMGPTModule.regret_loss`) flows from the recorded regrets
    back through every action, and through the observations it produced into later decisions. The
    task draws its noise before it computes the observation from the action (a reparameterisation),
    so an observation is differentiable in the action wherever the task's ``observe`` is.
    """
    device = torch.device(generator.device)
    # a policy whose steps are too small for several CPU threads plays on one (omgpt.threads.at_most);
    # not a differentiable rollout: its backward pass is a training step's
    limit = getattr(policy, "cpu_threads", None) if device.type == "cpu" and not differentiable else None
    with torch.set_grad_enabled(differentiable), threads.at_most(limit):
        return _rollout(task, envs, policy, horizon, generator, policy_generator)


def _rollout(
    task: Task, envs: Envs, policy, horizon: int, generator: torch.Generator, policy_generator: torch.Generator | None
) -> History:
    if horizon <= 0:
        raise ValueError(f"horizon must be positive, got {horizon}")
    batch = next(iter(envs.values())).shape[0]
    device = generator.device
    checks.memory(
        checks.history_bytes(task, batch, horizon), f"a rollout of {batch} environments for {horizon} steps", device
    )
    if policy_generator is None:
        policy_generator = torch.Generator(device=device).manual_seed(
            int(torch.randint(2**62, (), generator=generator, device=device))
        )
    dx, da, do = task.context_dim, task.action_dim, task.obs_dim
    contexts = torch.empty(batch, horizon, dx, device=device)
    actions = torch.empty(batch, horizon, da, device=device)
    observations = torch.empty(batch, horizon, do, device=device)
    optimal = torch.empty(batch, horizon, da, device=device)
    regrets, subopt, rewards, best = (torch.empty(batch, horizon, device=device) for _ in range(4))

    envs = task.start(envs, generator)
    policy.reset(envs, horizon, policy_generator)
    try:
        for t in range(horizon):
            x = task.sample_context(envs, t, generator)
            a = task.project(policy.act(t, x).to(x.dtype), x)
            a_star = task.optimal_action(envs, x, t)
            o = task.observe(envs, x, a, t, generator)
            policy.observe(t, a, o)
            contexts[:, t], actions[:, t], observations[:, t], optimal[:, t] = x, a, o, a_star
            # the rewards of this step in the state it is played in, before task.step moves on
            reward, optimal_reward = task.expected_reward(envs, x, a, t), task.optimal_reward(envs, x, t, a_star)
            rewards[:, t], best[:, t] = reward, optimal_reward
            regrets[:, t] = step_regret(optimal_reward, reward, x.dtype)  # = task.regret(envs, x, a, t, a_star)
            subopt[:, t] = task.suboptimality(envs, x, a, t, a_star)
            task.step(envs, x, a, o, t)
    finally:
        policy.close()  # e.g. OMGPT's KV cache: held only while its episodes run
    return History(contexts, actions, observations, optimal, regrets, subopt, rewards, best, envs=envs)


@torch.no_grad()
def replay(policy, history: History, generator: torch.Generator, probe=None) -> tuple[Tensor, list]:
    """Let ``policy`` decide along a recorded ``history``: at every step it acts on the recorded
    context, then observes the recorded action and observation (not its own), so it decides on the
    same ``H_t`` as whoever played the history (``alg-star``-match, probes).

    Returns ``(actions, probed)``: the policy's actions projected onto ``A``, ``(B, T, action_dim)``,
    and, when ``probe(policy, t, x)`` is given, what it returned at every step (called after the
    policy acted, before it observes). ``generator`` drives the policy's own randomness."""
    task = policy.task
    policy.reset(history.envs, history.horizon, generator)
    actions, probed = [], []
    try:
        for t in range(history.horizon):
            x = history.contexts[:, t]
            actions.append(task.project(policy.act(t, x).to(x.dtype), x))
            if probe is not None:
                probed.append(probe(policy, t, x))
            policy.observe(t, history.actions[:, t], history.observations[:, t])
    finally:
        policy.close()
    return torch.stack(actions, dim=1), probed
