"""The one batched rollout loop, and the History it produces.

Every history in the project -- pre-training data, evaluation of OMGPT and of every benchmark,
validation, probing -- comes from :func:`rollout`: ``B`` environments played for ``T`` steps against a
policy. Policies share one small interface (:class:`omgpt.policies.Policy`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch
from torch import Tensor

from omgpt import checks
from omgpt.tasks.base import Envs, Task


@dataclass
class History:
    """A batch of played episodes, all tensors batch-first.

    Attributes:
        contexts: ``X_t``, ``(B, T, context_dim)``.
        actions: ``a_t`` as played (after projection onto ``A``), ``(B, T, action_dim)``.
        observations: ``O_t``, ``(B, T, obs_dim)``.
        optimal_actions: ``a*_t``, ``(B, T, action_dim)`` -- the pre-training targets.
        regrets: per-step pseudo-regret ``r(X_t, a*_t) - r(X_t, a_t)``, ``(B, T)``.
        suboptimality: ``|a*_t - a_t|``, ``(B, T)``.
        envs: the hidden environments (for probing and posterior oracles).
    """

    contexts: Tensor
    actions: Tensor
    observations: Tensor
    optimal_actions: Tensor
    regrets: Tensor
    suboptimality: Tensor
    envs: Envs = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        return self.contexts.shape[1]

    def features(self) -> Tensor:
        """Feature tokens ``(O_{t-1}, X_t)`` with ``O_0 = 0``, shape ``(B, T, obs_dim + context_dim)``."""
        prev_obs = torch.cat([torch.zeros_like(self.observations[:, :1]), self.observations[:, :-1]], dim=1)
        return torch.cat([prev_obs, self.contexts], dim=-1)

    def tokens(self, window: int | None = None) -> tuple[Tensor, Tensor]:
        """The model's input: ``(features, actions)``, each ``(B, L, ·)``, ``L = min(T, window)``.

        The model interleaves them as ``(O_0,X_1), a_1, (O_1,X_2), a_2, …``; the read-out at feature
        token ``t`` predicts ``a*_t`` from the ``2t-1`` tokens up to it (SPEC §1). With a ``window``
        ``W`` only the last ``W`` steps are kept, as the model sees them at ``t = T`` (its first
        feature token then carries the observation of the step before the window, as it should).
        """
        feats, acts = self.features(), self.actions
        if window is not None and window < self.horizon:
            feats, acts = feats[:, -window:], acts[:, -window:]
        return feats, acts

    def truncate(self, horizon: int) -> "History":
        """The first ``horizon`` steps (the curriculum trains on truncated histories)."""
        cut = {f.name: getattr(self, f.name)[:, :horizon] for f in fields(self) if f.name != "envs"}
        return History(**cut, envs=self.envs)

    def to(self, device) -> "History":
        moved = {f.name: getattr(self, f.name).to(device) for f in fields(self) if f.name != "envs"}
        return History(**moved, envs={k: v.to(device) for k, v in self.envs.items()})

    def cumulative_regret(self) -> Tensor:
        """``Σ_{s≤t} regret_s``, shape ``(B, T)``."""
        return self.regrets.cumsum(dim=1)


@torch.no_grad()
def rollout(
    task: Task,
    envs: Envs,
    policy,
    horizon: int,
    generator: torch.Generator,
    policy_generator: torch.Generator | None = None,
) -> History:
    """Play ``horizon`` steps of every environment in ``envs`` with ``policy``.

    ``generator`` drives the task (contexts, observation noise) and ``policy_generator`` the policy's
    own randomness. Keeping them apart gives common random numbers: two policies run with the same
    seeds face exactly the same contexts and demand shocks, so their regret curves differ only by
    their decisions.
    """
    if horizon <= 0:
        raise ValueError(f"horizon must be positive, got {horizon}")
    batch = next(iter(envs.values())).shape[0]
    device = generator.device
    checks.memory(checks.history_bytes(task, batch, horizon), f"a rollout of {batch} environments for {horizon} steps", device)
    if policy_generator is None:
        policy_generator = torch.Generator(device=device).manual_seed(
            int(torch.randint(2**62, (), generator=generator, device=device))
        )
    dx, da, do = task.context_dim, task.action_dim, task.obs_dim
    contexts = torch.empty(batch, horizon, dx, device=device)
    actions = torch.empty(batch, horizon, da, device=device)
    observations = torch.empty(batch, horizon, do, device=device)
    optimal = torch.empty(batch, horizon, da, device=device)
    regrets = torch.empty(batch, horizon, device=device)
    subopt = torch.empty(batch, horizon, device=device)

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
            regrets[:, t] = task.regret(envs, x, a, t, a_star)
            subopt[:, t] = task.suboptimality(envs, x, a, t, a_star)
            task.step(envs, x, a, o, t)
    finally:
        policy.close()  # e.g. OMGPT's KV cache: held only while its episodes run
    return History(contexts, actions, observations, optimal, regrets, subopt, envs=envs)
