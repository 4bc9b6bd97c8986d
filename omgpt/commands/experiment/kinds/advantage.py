"""``advantage``: the reward improvement rate of OMGPT over the best benchmark (paper §5.1.2) on a grid
of model depths x problem dimensions (each panel's ``grid: {layers, dimension}``): the heat map, the
same study as scaling curves, and the regret curves of every panel in one figure.

``model-size``: that grid for models of 2 / 4 / 6 layers (12 at the paper's scale) on problems of
dimension 4 / 10 / 20, and the paper's trends across it checked."""

from __future__ import annotations

from pathlib import Path

from omgpt.commands.experiment.registry import Check, Kind, register
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


@register
class ModelSize(Advantage):
    name = "model-size"

    def claims(self, result: ExperimentResult) -> list[Check]:
        from omgpt.analysis.experiment_figures import improvement_rate

        rate = {(p["grid"]["layers"], p["grid"]["dimension"]): improvement_rate(p) for p in result["panels"]}
        layers, dims = sorted({n for n, _ in rate}), sorted({d for _, d in rate})
        grid = "; ".join(f"{n} layers: " + ", ".join(f"d={d} {100 * rate[n, d]:+.1f}%" for d in dims) for n in layers)
        up = [all(rate[a, d] < rate[b, d] for a, b in zip(layers, layers[1:])) for d in dims]
        down = [all(rate[n, a] > rate[n, b] for a, b in zip(dims, dims[1:])) for n in layers]
        return [
            (
                "the improvement rate over the best of ILSE, CILS and TS is positive everywhere",
                all(r > 0 for r in rate.values()),
                grid,
            ),
            (
                "it grows with the number of layers",
                all(up),
                f"rising with depth at {sum(up)} of {len(dims)} dimensions",
            ),
            (
                "it shrinks as the context dimension grows",
                all(down),
                f"falling with dimension at {sum(down)} of {len(layers)} depths",
            ),
        ]
