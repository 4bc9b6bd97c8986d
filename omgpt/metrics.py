"""DDP-safe evaluation metrics (torchmetrics): per-step curves reduced by summing over ranks."""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


class MeanCurve(Metric):
    """Mean over episodes of a per-step curve such as cumulative regret, ``(T,)``.

    ``update(curves)`` takes ``(B, T)``; states are sums (of values and of their squares), so DDP
    reduction is exact whatever the per-rank batch sizes. The final value ``compute()[-1]`` is the mean
    final regret, ``std()[-1]`` its standard deviation across episodes.
    """

    full_state_update = False

    def __init__(self, horizon: int, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", default=torch.zeros(horizon, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total_sq", default=torch.zeros(horizon, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, curves: Tensor) -> None:
        t = min(curves.shape[1], self.total.shape[0])
        values = curves[:, :t].to(self.total.dtype)
        self.total[:t] += values.sum(0)
        self.total_sq[:t] += values.pow(2).sum(0)
        self.count += curves.shape[0]

    def compute(self) -> Tensor:
        return (self.total / self.count.clamp(min=1)).float()

    def std(self) -> Tensor:
        """Population standard deviation across episodes, per step, ``(T,)`` (reduced across ranks
        like ``compute``: call it where ``compute`` is called)."""
        with self.sync_context():  # the sums of every rank, as compute() sees them (no-op outside DDP)
            n = self.count.clamp(min=1)
            mean = self.total / n
            var = (self.total_sq / n - mean.pow(2)).clamp(min=0)
        return var.sqrt().float()
