"""``advantage``: the reward improvement rate of OMGPT over the best benchmark (paper §5.1.2) on a grid
of model depths x problem dimensions (each panel's ``grid: {layers, dimension}``): the heat map, the
same study as scaling curves, and the regret curves of every panel in one figure."""

from __future__ import annotations

from pathlib import Path

from omgpt.commands.experiment.registry import Kind, register
from omgpt.commands.experiment.results import ExperimentResult, RegretPanel


@register
class Advantage(Kind):
    name = "advantage"
    rewards = True  # the improvement rate compares expected rewards: the optimal policy's minus the regret

    def figures(self, result: ExperimentResult, out: Path) -> list[Path]:
        from omgpt.analysis.experiment_figures import advantage_figure, curves_figure, scaling_figure

        return [
            advantage_figure(result["panels"], out / "advantage.png"),
            scaling_figure(result, out / "scaling.png"),
            curves_figure(result["panels"], out / "regret.png"),
        ]

    def headline(self, panel: RegretPanel) -> str:
        from omgpt.analysis.experiment_figures import improvement_rate

        rate = f"reward improvement over the best benchmark {100 * improvement_rate(panel):+.1f}%"
        return "; ".join(filter(None, [super().headline(panel), rate]))
