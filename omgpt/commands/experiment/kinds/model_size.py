"""``model-size``: the advantage grid of models of 2 / 4 / 6 layers (12 at the paper's scale) on
problems of dimension 4 / 10 / 20, and the paper's trends across it checked."""

from __future__ import annotations

from omgpt.commands.experiment.kinds.advantage import Advantage
from omgpt.commands.experiment.registry import Check, register
from omgpt.commands.experiment.results import ExperimentResult


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
