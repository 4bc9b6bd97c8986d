"""Network revenue-management benchmark (paper appendix D.3): the Adaptive Allocation algorithm (Ada,
Chen et al. 2024; the paper's algorithm 4).

Ada re-solves the fluid LP every period with the EMPIRICAL type frequencies in place of the unknown
arrival probabilities:

    max Σ_k (n_{t-1}(k)/(t-1)) r~^k y'_k   s.t.  Σ_k (n_{t-1}(k)/(t-1)) A~^k y'_k ≤ b_t,   0 ≤ y' ≤ 1,

with ``n_{t-1}(k)`` the arrivals of type ``k`` in periods ``1..t-1`` and ``b_t = B_t/(T-t+1)`` the
remaining budget per remaining period, and accepts the arriving request (of type ``k``) with
probability ``y'_k``. The first request is accepted (``y_1 = 1``). The action is the acceptance
probability; the task draws the acceptance coin and rejects a request the budget cannot cover
("when the constraint permits; otherwise set ``y_t = 0``" is the task's job).
"""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt.policies.base import Policy, register_policy
from omgpt.tasks.revenue import Revenue, fluid_lp


@register_policy("ada", tasks=(Revenue,))
class Ada(Policy):
    """Algorithm 4, batched over environments; one :func:`~omgpt.tasks.revenue.fluid_lp` call per step.

    What it reads. Algorithm 4's input is ``T`` and the type table ``X = {(r~^k, A~^k)}_{k=1..K}``:
    the decision maker knows which customer types exist and what they pay and consume, and only the
    arrival probabilities are unknown. So :meth:`reset` copies ``envs["r"]`` ``(B, K)`` and
    ``envs["A"]`` ``(B, K, J)`` -- the type table, an input of the algorithm, not hidden information --
    and nothing else: never ``envs["p"]`` (the unknown probabilities) nor the budget state.

    Type identification (algorithm 4, "identify ``(r~_t, A~_t) = (r~^k, A~^k)``"): the context's first
    ``1 + J`` numbers copy the arriving type's row of the table (in float32), so the type is the
    nearest row (:meth:`Revenue.arriving_type` applied to the table alone). The counts ``n_t(k)`` are
    accumulated from these identified arrivals, after the step's decision.

    Budget. ``b_t = B_t/(T-t+1)`` is the context's last ``J`` numbers (the task computes it from the
    realised acceptances exactly as algorithm 4's lines 5-6 do, ``B_t = B_{t-1} - A~_{t-1} y_{t-1}``).

    Unseen types. A type with ``n_{t-1}(k) = 0`` has a zero column in the LP, so every ``y'_k ∈ [0, 1]``
    is optimal and algorithm 4 does not say which to play (the exact vertex solver returns 0). We play
    ``y'_k = 1``: the algorithm's own choice when nothing has been seen (``y_1 = 1``, when every count
    is 0), i.e. accept a request of a type not seen before whenever the budget permits.

    Args:
        solver: the LP solver, ``"enum"`` / ``"cvxpy"`` (default: the task's).
    """

    def __init__(self, task, solver: str | None = None):
        super().__init__(task)
        self.solver = solver or task.solver

    def reset(self, envs, horizon, generator):
        super().reset(envs, horizon, generator)
        self.table = {"r": envs["r"], "A": envs["A"]}  # algorithm 4's input X; never envs["p"]
        self.counts = torch.zeros(self.batch, self.task.types, dtype=torch.float64, device=envs["r"].device)
        self.arrival: Tensor | None = None  # the type identified at the current step

    def identify(self, x: Tensor) -> Tensor:
        """The arriving type ``(B,)`` by matching ``(r~_t, A~_t)`` to the type table."""
        return self.task.arriving_type(self.table, x.to(self.table["r"].device))

    def allocation(self, t: int, b: Tensor) -> Tensor:
        """``y'*_t`` ``(B, K)`` (float64) at 0-based step ``t ≥ 1`` (the paper's ``t + 1``) from the
        counts of the ``t`` past arrivals and the per-period budget ``b`` ``(B, J)``."""
        freq = self.counts / t  # n_{t-1}(k) / (t - 1) in the paper's 1-based t
        y = fluid_lp(self.table["r"], self.table["A"], freq, b, self.solver)
        return torch.where(self.counts > 0, y, torch.ones_like(y))  # unseen types: accept (see above)

    def act(self, t: int, x: Tensor) -> Tensor:
        self.arrival = self.identify(x)
        if t == 0:
            return torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)  # y_1 = 1
        j = self.task.resources
        y = self.allocation(t, x[:, 1 + j : 1 + 2 * j].to(self.counts.device))
        rows = torch.arange(self.batch, device=y.device)
        return y[rows, self.arrival][:, None].to(dtype=x.dtype, device=x.device)

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        self.counts += torch.nn.functional.one_hot(self.arrival, self.task.types).to(self.counts)
