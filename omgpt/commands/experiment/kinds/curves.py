"""``curves``: OMGPT against the benchmarks by regret, one regret / suboptimality figure per ``figure_file``
(the paper's main results, horizon generalisation, distribution shift, misspecification, transformer vs
LSTM). The plain case: :class:`~omgpt.commands.experiment.registry.Kind`'s defaults, where the verdict of
each panel is the whole claim.

``prior-benefit``: the same curves, of 4-environment and harder pools, and the claim that OMGPT and
``Alg*`` -- which both know the prior -- beat the prior-free benchmarks on every panel."""

from __future__ import annotations

from omgpt.analysis.report import best_benchmark, final_regrets
from omgpt.commands.experiment.panels import panel_state
from omgpt.commands.experiment.registry import Check, Kind, register
from omgpt.commands.experiment.results import ExperimentResult


@register
class Curves(Kind):
    name = "curves"


@register
class PriorBenefit(Curves):
    name = "prior-benefit"

    def claims(self, result: ExperimentResult) -> list[Check]:
        rows, holds = [], []
        for p in result["panels"]:
            finals, (best, bench) = final_regrets(p), best_benchmark(p)
            ours, star = finals["omgpt"], finals.get("alg-star")
            states = {k: panel_state(p, k) for k in ("omgpt", "alg-star") if k in finals}
            holds.append(all(s == "below" for s in states.values()))
            star_text = f", Alg* {star:.3g} ({states['alg-star']})" if star is not None else ""
            rows.append(
                f"{p['title']}: OMGPT {ours:.3g} ({states['omgpt']}){star_text} vs {best} {bench:.3g} ({bench / ours:.1f}x OMGPT's)"
            )
        return [
            (
                "OMGPT and Alg* have lower regret than the prior-free benchmarks on every panel (each paired 90% interval against the best benchmark wholly below it)",
                all(holds),
                f"{sum(holds)} of {len(holds)} panels; " + "; ".join(rows),
            )
        ]
