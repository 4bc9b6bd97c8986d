"""DDP-safe evaluation metrics (torchmetrics): per-step curves reduced by summing over ranks."""
from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


class MeanCurve(Metric):
    """Mean over episodes of a per-step curve such as cumulative regret, ``(T,)``.

    ``update(curves)`` takes ``(B, T)``; states are sums, so DDP reduction is exact whatever the
    per-rank batch sizes. The final value ``compute()[-1]`` is the mean final regret.
    """

    full_state_update = False

    def __init__(self, horizon: int, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", default=torch.zeros(horizon, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, curves: Tensor) -> None:
        t = min(curves.shape[1], self.total.shape[0])
        self.total[:t] += curves[:, :t].to(self.total.dtype).sum(0)
        self.count += curves.shape[0]

    def compute(self) -> Tensor:
        return (self.total / self.count.clamp(min=1)).float()
