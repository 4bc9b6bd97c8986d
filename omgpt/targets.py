"""Posterior-weighted pre-training targets (``model.target: posterior`` and ``bayes_action``).

The paper trains on ``ℓ(f(H_t), a*(γ))``, ``γ`` the environment that generated the history: given the
history, one draw from the posterior ``P(γ | H_t)``. Its expectation over that posterior,
``Σ_k w_k(H_t) ℓ(f(H_t), a*(γ_k))``, has the same minimiser -- the Bayes decision under ``ℓ`` -- and,
being a conditional expectation of the single-draw loss, a gradient of no larger variance
(Rao-Blackwell). Every synthetic task with a likelihood has that posterior: ``alg-star`` computes it,
exactly over a finite pool and with weighted particles on a continuous prior. Here it is replayed
along each training batch's own histories (the contexts, actions and observations the batch holds),
so it applies to the data policy's histories and the model's self-rollouts alike.
"""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt.tasks.base import Task

# Particles of the default (resample-move) sampler where a continuous prior has no structured one: its
# 4,096 would hold (B, T, 4,096, action_dim) candidate actions per batch.
POSTERIOR_PARTICLES = 512


@torch.no_grad()
def posterior_targets(
    task: Task, contexts: Tensor, actions: Tensor, observations: Tensor, generator: torch.Generator
) -> dict[str, Tensor]:
    """At every step ``t`` of every history: the candidate environments' optimal actions at ``X_t``,
    ``candidates (B, T, N, action_dim)``, and their posterior weights given the steps before ``t``,
    ``posterior (B, T, N)`` (rows sum to 1), from ``alg-star`` replayed along the histories
    ``(B, T, ·)``. ``generator`` drives the particles (unused over a pool)."""
    steps = _replayed(
        task,
        contexts,
        actions,
        observations,
        generator,
        lambda policy, t, x: (policy.candidate_actions(t, x), policy.posterior().to(x.dtype)),
    )
    return {"candidates": torch.stack([c for c, _ in steps], 1), "posterior": torch.stack([w for _, w in steps], 1)}


@torch.no_grad()
def bayes_action_targets(
    task: Task, contexts: Tensor, actions: Tensor, observations: Tensor, generator: torch.Generator
) -> Tensor:
    """``model.target: bayes_action``: at every step the action of the task's grid with the highest
    posterior-expected value given the steps before, ``argmax_a Σ_k w_k Q_t^{γ_k}(X_t, a)`` (each candidate
    valued with its own optimal policy after the step: :meth:`~omgpt.tasks.base.Task.action_values`),
    ``(B, T, action_dim)``. Under a squared loss the Bayes decision of the single-draw target ``a*(γ)`` is
    the posterior mean of ``a*``, which the grid then rounds; this target's is the best grid action."""
    return torch.stack(
        _replayed(task, contexts, actions, observations, generator, lambda policy, t, x: policy.best_valued(t, x)), 1
    )


def _replayed(
    task: Task, contexts: Tensor, actions: Tensor, observations: Tensor, generator: torch.Generator, read
) -> list:
    """``read(policy, t, X_t)`` at every step of ``alg-star`` replayed along the histories ``(B, T, ·)``
    (the posterior given the steps before ``t``)."""
    from omgpt.policies.alg_star import AlgStar

    b, horizon = contexts.shape[:2]
    policy = AlgStar(task, particles=None if task.pool is not None else POSTERIOR_PARTICLES)
    # the replay reads the batch size alone from the environments: the histories carry none
    policy.reset({"batch": torch.zeros(b, device=contexts.device)}, horizon, generator)
    out = []
    for t in range(horizon):
        x = contexts[:, t]
        policy.weigh(t, x)  # records X_t; a structured sampler weighs its particles for it (no decision)
        out.append(read(policy, t, x))
        policy.observe(t, actions[:, t], observations[:, t])
    policy.close()
    return out


def posterior_loss(task: Task, pred: Tensor, candidates: Tensor, posterior: Tensor, action_scale: Tensor) -> Tensor:
    """``Σ_k w_k ℓ(pred, a*_k)`` averaged over positions: the task's loss against each candidate's optimal
    action, weighted by the posterior (the single-draw loss of :meth:`Task.action_loss` averaged over
    ``γ ~ P(γ | H_t)``). ``pred (B, T, A)``, ``candidates (B, T, N, A)``, ``posterior (B, T, N)``."""
    if task.loss == "ce":  # cross-entropy is linear in its target: against the posterior of the best arm
        labels = torch.nn.functional.one_hot(candidates.argmax(-1), candidates.shape[-1]).to(posterior.dtype)
        soft = (posterior[..., None] * labels).sum(-2)
        return torch.nn.functional.cross_entropy(pred.flatten(0, -2), soft.flatten(0, -2))
    error = (pred[..., None, :] - candidates) / action_scale
    per_candidate = (error.pow(2) if task.loss == "mse" else error.abs()).mean(-1)  # as the task's loss
    return (posterior * per_candidate).sum(-1).mean()
