"""``curves``: OMGPT against the benchmarks by regret, one regret / suboptimality figure per ``figure_file``
(the paper's main results, horizon generalisation, distribution shift, misspecification, transformer vs
LSTM). The plain case: :class:`~omgpt.commands.experiment.registry.Kind`'s defaults, where the verdict of
each panel is the whole claim."""

from __future__ import annotations

from omgpt.commands.experiment.registry import Kind, register


@register
class Curves(Kind):
    name = "curves"
