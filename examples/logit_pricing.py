"""Add your own decision problem: dynamic pricing under logit demand, in one file.

Not one of the paper's tasks. A seller posts a price ``a_t ∈ [0, 10]`` each period; ``N = 10``
customers arrive and each buys with the logit probability

    q(X_t, a) = σ(αᵀX_t - β a),   σ(u) = 1 / (1 + e^{-u}),

where ``X_t ~ U[0, 1]^d`` describes the period (``d = 2``), and the environment ``γ = (α, β)`` -- how
much customers value the product and how price-sensitive they are -- is unknown: ``α ~ U[0, 2]^d``,
``β ~ U[0.5, 1.5]``. The seller observes the number of buyers ``O_t ~ Binomial(N, q)`` and earns
``a_t O_t``. The optimal price maximises ``a σ(u - β a)``, ``u = αᵀX``: setting the derivative to zero
gives ``z - 1 = e^{u - z}`` for ``z = β a``, i.e. ``a* = (1 + W(e^{u-1})) / β`` with Lambert's ``W``
(solved here by Newton's method, on any device).

Everything OMGPT needs is the class below: the prior (``sample_prior``), the simulator
(``sample_context``, ``observe``), ``optimal_action`` and ``expected_reward``, the scaling of its numbers,
and -- for the posterior oracle ``alg-star`` -- the likelihood of an observation and the prior density.
Registering it (``@register``) is all the wiring: training, evaluation, ``oracle``, ``random``,
``noisy-oracle`` and ``alg-star`` work on it unchanged. Run the commands through this file so that the
task is registered::

    python examples/logit_pricing.py fit --config configs/scale/tiny.yaml --model.task logit-pricing --model.horizon 30
    python examples/logit_pricing.py evaluate --ckpt runs/.../last.ckpt --policies omgpt,oracle,alg-star,random --runs 50

(or ``import examples.logit_pricing`` before calling :func:`omgpt.commands.cli.cli_main` in Python).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from omgpt import checks
from omgpt.tasks.base import Envs, Scaling, Task

from omgpt.tasks.densities import box_log_density, uniform

from omgpt.tasks.registry import register

ALPHA_RANGE = (0.0, 2.0)  # willingness to pay, per context feature
BETA_RANGE = (0.5, 1.5)  # price sensitivity


@register("logit-pricing")
class LogitPricing(Task):
    """Args:
    dim: context dimension ``d``.
    customers: customers per period ``N`` (the observation is how many of them buy).
    """

    loss = "mse"  # regress a*: alg-star then decides by the posterior mean of a*
    moved_params = ("alpha", "beta")  # what alg-star's particle moves perturb (all of γ: it is continuous)
    benchmarks = ("random",)
    obs_dim = 1
    action_dim = 1
    action_low, action_high = 0.0, 10.0
    default_horizon = 50

    def __init__(self, dim: int = 2, customers: int = 10, **pool):
        # sizes as every built-in task checks them: dim=0 or customers=0 would run and report meaningless numbers
        self.dim, self.customers = checks.size("dim", dim), checks.size("customers", customers)
        self.context_dim = self.dim
        super().__init__(**pool)

    # -- prior and simulator ------------------------------------------------------------------------
    def sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        return {
            "alpha": uniform(n, (self.dim,), *ALPHA_RANGE, generator),
            "beta": uniform(n, (), *BETA_RANGE, generator),
        }

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        return uniform(envs["beta"].shape[0], (self.dim,), 0.0, 1.0, generator)

    def utility(self, envs: Envs, x: Tensor, a: Tensor) -> Tensor:
        """``αᵀX - β a``, the logit of the purchase probability, ``(B,)``."""
        return (envs["alpha"] * x).sum(-1) - envs["beta"] * a[:, 0]

    def observe(self, envs: Envs, x: Tensor, a: Tensor, t: int, generator: torch.Generator) -> Tensor:
        q = torch.sigmoid(self.utility(envs, x, a))
        u = torch.rand(q.shape[0], self.customers, generator=generator, device=generator.device)
        return (u < q[:, None]).sum(-1, keepdim=True).to(x.dtype)  # buyers among N

    # -- decisions and rewards ----------------------------------------------------------------------
    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        return a[:, 0] * self.customers * torch.sigmoid(self.utility(envs, x, a))

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        u = (envs["alpha"] * x).sum(-1).double()
        z = 1.0 + torch.log1p(torch.exp(u - 1.0))  # W(y) ≈ log(1 + y): a start close enough for Newton
        for _ in range(20):  # g(z) = z - 1 - e^{u - z} is increasing and convex: Newton converges from either side
            e = torch.exp(u - z)
            z = z - (z - 1.0 - e) / (1.0 + e)
        return self.project((z / envs["beta"].double()).to(x.dtype)[:, None], x)

    # -- the model of the world (for alg-star and analysis) -----------------------------------------
    def mean_observation(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        return (self.customers * torch.sigmoid(self.utility(envs, x, a)))[:, None]

    def log_likelihood(self, candidates: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> Tensor:
        """Binomial: ``O log q + (N - O) log(1 - q)`` (the binomial coefficient is the same for every
        candidate), with ``log q = log σ(η)`` and ``log(1 - q) = log σ(-η)`` computed stably."""
        eta, buyers = self.utility(candidates, x, a), o[:, 0]
        return buyers * F.logsigmoid(eta) + (self.customers - buyers) * F.logsigmoid(-eta)

    def log_prior(self, candidates: Envs) -> Tensor:
        return box_log_density(candidates["alpha"], *ALPHA_RANGE) + box_log_density(
            candidates["beta"][:, None], *BETA_RANGE
        )

    def scaling(self) -> Scaling:
        # Measured under the prior (d = 2, N = 10, 4096 environments x 50 steps) with the noisy oracle's
        # prices, the pre-training data: buyers mean 3.6, sd 1.9; a* mean 1.74, sd 0.63 (at most ~6).
        # X ~ U[0, 1]: mean 0.5, sd 0.29.
        return Scaling(
            feature_loc=(3.6,) + (0.5,) * self.dim,
            feature_scale=(1.9,) + (0.29,) * self.dim,
            action_loc=(1.75,),
            action_scale=(0.65,),
        )


if __name__ == "__main__":  # the omgpt command line, with this task registered
    from omgpt.commands.cli import main

    main()
