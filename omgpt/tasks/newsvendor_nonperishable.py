"""Non-perishable newsvendor (paper §5.2.3 and appendix D.2; docs/paper-gaps.md §3): leftover stock carries over.

Everything of :class:`~omgpt.tasks.newsvendor.Newsvendor` (prior, demand types, change point,
censoring) plus an inventory state:

* ``I_1 = 0`` and ``I_{t+1} = max(0, a_t - D_t)`` -- the units left after period ``t`` are carried into
  period ``t+1``. Under censoring the sales ``O_t = min(D_t, a_t)`` give the same ``a_t - O_t``, so
  the state is known to the decision maker in both cases. The state lives in ``envs["inventory"]``
  ``(B,)``, set to zero by :meth:`start` and replaced (never modified in place) by :meth:`step`.
* The action is the order-up-to level (docs/paper-gaps.md §3: the paper mixes order quantity and order-up-to
  level; we take the level), so the action set is ``[I_t, 30 + I_t]`` (you cannot order a negative
  quantity, nor more than 30 units); :meth:`project` clips onto it using ``I_t`` from the context.
* Context ``X_t = (I_t, h, X~_t)``.
* Reward: the period's cost with the perishable formula applied to the stock on hand ``a``, i.e.
  ``-(h (a - D)^+ + l (D - a)^+)``. A unit left over is charged the holding cost ``h`` in the period it
  is left over and is then carried into the next period (it is not lost); ordering itself is free.
* ``a*_t = max(I_t, wᵀX~_t + ε̄/(1+h))`` (the order-up-to reading, docs/paper-gaps.md §3, of the paper's
  ``max{0, wᵀX~ + ε̄/(1+h) - I_t}`` order quantity), more precisely the demand quantile clipped to
  ``[I_t, 30 + I_t]``: the one-period expected cost is convex in ``a``, so this is the maximiser of
  the expected reward over the state's action set, and the per-step pseudo-regret
  ``r(X_t, a*_t) - r(X_t, a_t)`` is taken given the state ``I_t`` the policy itself reached (the
  myopic optimum, as the paper defines ``a*_t``; it ignores that a lower level today leaves less stock
  tomorrow).

Outside a rollout (``envs`` without ``"inventory"``, e.g. fresh from :meth:`sample_envs`)
:meth:`sample_context` uses ``I = 0``, the initial state.

Benchmarks: none by default (``benchmarks = ()``; the paper runs none here). ``erm`` and ``fai``
still apply: they read ``(h, X~)`` through ``task.split_context`` (which skips the inventory column),
and their orders are order-up-to levels, projected onto ``[I_t, 30 + I_t]`` by the rollout.
"""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt.tasks.base import Envs, Scaling

from omgpt.tasks.registry import register
from omgpt.tasks.newsvendor import Newsvendor


@register("newsvendor-nonperishable", censored=False)
@register("newsvendor-nonperishable-censored", censored=True)
class NonperishableNewsvendor(Newsvendor):
    """The non-perishable newsvendor; options as :class:`~omgpt.tasks.newsvendor.Newsvendor`."""

    name = "newsvendor-nonperishable"
    # The paper runs no benchmark on this task (§5.2.3 studies OMGPT alone). ERM and FAI would apply
    # once they read (h, X~) through ``task.split_context`` instead of the perishable layout.
    benchmarks = ()
    state_dims = 1  # the inventory I_t heads the context

    def start(self, envs: Envs, generator: torch.Generator) -> Envs:
        started = dict(envs)
        started["inventory"] = torch.zeros_like(envs["eps_bar"])  # I_1 = 0
        return started

    def step(self, envs: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> None:
        # O = D (uncensored) or min(D, a) (censored): either way a - O clipped at 0 is max(0, a - D).
        envs["inventory"] = (a[:, 0] - o[:, 0]).clamp(min=0.0)

    def inventory(self, envs: Envs) -> Tensor:
        """``I_t`` ``(B,)`` (zero before :meth:`start`)."""
        if "inventory" in envs:
            return envs["inventory"]
        return torch.zeros_like(envs["eps_bar"])

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        x = super().sample_context(envs, t, generator)  # (h, X~): the same draws as the perishable task
        return torch.cat([self.inventory(envs).to(x.dtype)[:, None], x], dim=-1)

    def project(self, a: Tensor, x: Tensor | None = None) -> Tensor:
        """Clip the order-up-to level onto ``[I_t, 30 + I_t]`` (``I_t = x[:, 0]``); without a context,
        onto ``A = [0, 30]``."""
        if x is None:
            return super().project(a)
        low = x[:, :1]
        return torch.minimum(torch.maximum(a, low + self.action_low), low + self.action_high)

    def scaling(self) -> Scaling:
        # Inventory under noisy-oracle orders (d = 4, 4096 environments x 100 steps): mean 0.63, sd 1.02
        # for every demand type, censored or not (most periods start empty or nearly so: the oracle's
        # level is the demand's 1/(1+h) quantile, so the leftover is small). The rest as perishable.
        base = super().scaling()
        return Scaling(
            feature_loc=base.feature_loc[:1] + (0.6,) + base.feature_loc[1:],
            feature_scale=base.feature_scale[:1] + (1.0,) + base.feature_scale[1:],
            action_loc=base.action_loc,
            action_scale=base.action_scale,
        )
