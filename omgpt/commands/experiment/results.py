"""What ``omgpt experiment`` writes to ``OUT/experiment.json`` and ``--redraw`` reads back: the typed
records of the *numbers* (the resolved *specs* are :mod:`omgpt.commands.experiment.config`'s dataclasses),
each beside the :mod:`omgpt.records` schema that checks it.

The numbers are :class:`~typing.TypedDict` s, not dataclasses, because they are JSON first: a panel is
written as it is built and read back as it was written, key order included, so ``--redraw`` of a
committed ``experiment.json`` rewrites it byte for byte with no conversion in either direction; a kind
adds its own fields to its panels (:class:`RegretPanel` plus ``alg_star_match``, ``finetuning``, ...),
which a dataclass would have to carry as an untyped extra; and a file written by an older version (a
field fewer) still reads, where a dataclass constructor would refuse it. What the types say is checked at
the edge instead: :data:`REPORT` and each kind's ``panel_schema`` (:data:`PANEL` for the regret
comparison) before anything is drawn from a file (``read_report`` in :mod:`omgpt.commands.experiment`).
The required keys of each record are its schema's (``tests/test_experiment.py`` holds them equal).
"""

# No ``from __future__ import annotations`` here: under it Python 3.11 reads a TypedDict's NotRequired
# keys as required (the annotations stay strings).
from typing import Any, NotRequired, TypedDict

from omgpt.records import NUMBER, ListOf, MapOf, Nullable, Optional

# --------------------------------------------------------------------------------------------------
# The records
Interval = list[float | None] | None  # [lo, hi]; None for one run, hi None when open above


class Curve(TypedDict):
    mean: list[float]  # one value per step, 4 decimals (omgpt.commands.experiment.panels.rounded)
    band90: list[list[float]]  # [low, high], each one value per step


class FinalRegret(TypedDict):
    mean: float
    ci90: Interval
    band90: list[float]


class Ratio(TypedDict):
    """A paired ratio of mean final regrets (:func:`omgpt.analysis.report.paired_ratio`)."""

    mean: float | None  # None where the reference's mean is not positive
    ci90: Interval
    runs: NotRequired[int]


class Versus(Ratio):
    """A model against the best benchmark (:func:`omgpt.commands.experiment.panels.versus_best`): the
    paired ratio, or the difference where regrets can be negative, and the three-state verdict."""

    against: str
    statistic: str  # "ratio" or "difference"
    state: str  # "below", "level" or "behind"


class PolicyNumbers(TypedDict):
    """One policy's numbers on a regret panel."""

    final_regret: FinalRegret
    final_suboptimality: dict[str, float]  # {"mean": ...}
    curves: dict[str, Curve]  # "regret", "suboptimality"
    ratio_to_alg_star: NotRequired[Ratio]  # where alg-star was played
    optimal_reward: NotRequired[float]  # kinds with Kind.rewards (reward improvement rates)


class PanelResult(TypedDict):
    """What every panel of every kind holds: which evaluation it is. A kind's panels add their numbers
    (:class:`RegretPanel`; ``demand_prediction`` for that kind)."""

    title: str
    task: str
    task_options: dict[str, Any]
    horizon: int
    model: str


class RegretPanel(PanelResult):
    """A panel of the regret comparison (:func:`omgpt.commands.experiment.panels.evaluate_panel`):
    ``policies`` maps each label to its numbers (in the spec, :class:`~omgpt.commands.experiment.config.Panel`,
    ``policies`` is the list of names played)."""

    benchmarks: list[str]  # the labels that are benchmarks (not OMGPT, alg-star, oracles, yardsticks)
    models_compared: list[str]  # the labels that are OMGPT models
    policies: dict[str, PolicyNumbers]
    window: NotRequired[int | None]  # OMGPT's context window where it acts past its trained horizon
    tuned_on: NotRequired[str]  # the setting the -tuned benchmarks' constants were chosen on
    tuned_constants: NotRequired[dict[str, dict[str, Any]]]
    grid: NotRequired[dict[str, int]]
    note: NotRequired[str]
    best_benchmark: NotRequired[dict[str, Any]]  # panels.best_on_validation; absent without benchmarks
    vs_best: NotRequired[dict[str, Versus]]  # each model against the best benchmark (panels.versus_best)
    sizing: NotRequired[dict[str, Any]]  # how the panel's runs were sized (panels.size_runs)
    figure_file: NotRequired[str]


class ModelRecord(TypedDict, total=False):
    """A model's training record as the run store wrote it (:mod:`omgpt.commands.store`; a shipped
    reference model's from its card), with ``ckpt`` relative to the repository in ``experiment.json``."""

    model: str
    key: str  # the store folder (task-<hash>) or pretrained/NAME
    command: str
    ckpt: str
    init_from: str  # the parent's key, for a model that starts from another's weights
    train_seconds: float
    cpu_seconds: float
    steps: int
    best_val_regret: float
    val_regret: list[list[float]]  # [step, regret] per validation
    val_obs_mse: list[list[float]]  # the observation head's [step, error], where logged
    selected_by: str


class ExperimentResult(TypedDict):
    """``OUT/experiment.json``: the report's inputs, every number included."""

    name: str
    title: str
    source: str
    claim: str
    scale: str
    runs: int
    seed: int
    command: str
    kind: NotRequired[str]  # the experiment kind that evaluated it (Kind.name)
    figure: NotRequired[str]  # what a report written before the rename holds instead of ``kind``: the config's
    settings: NotRequired[dict]  # the config's declared settings (Kind.settings), as the run read them
    models: dict[str, ModelRecord]
    panels: list[PanelResult]
    seconds: float
    evaluation_seconds: NotRequired[float]  # the sum of the panels' evaluation times (each in its own process)
    untimed_panels: NotRequired[int]  # panels read from the panel store without a recorded time (not in the sum)
    code_version: NotRequired[str]
    figures: list[str]  # the figure files, relative to the report folder


def kind_name(result: ExperimentResult) -> str:
    """The kind a report names (``kind``; ``figure`` in one written before the rename; ``curves`` in
    neither): what ``registry.kind_of`` reads."""
    return result.get("kind") or result.get("figure") or "curves"


# --------------------------------------------------------------------------------------------------
# Their schemas (omgpt.records): what --redraw checks before it draws anything
INTERVAL = Nullable(ListOf(Nullable(NUMBER)))
CURVE = {"mean": ListOf(NUMBER, nonempty=True), "band90": ListOf(ListOf(NUMBER))}
POLICY_NUMBERS = {
    "final_regret": {"mean": NUMBER, "ci90": INTERVAL, "band90": ListOf(NUMBER)},
    "final_suboptimality": {"mean": NUMBER},
    "curves": {"regret": CURVE, "suboptimality": CURVE},
    "ratio_to_alg_star": Optional({"mean": Nullable(NUMBER), "ci90": INTERVAL}),
}
PANEL_BASE = {"title": str, "task": str, "task_options": dict, "horizon": int, "model": str}  # PanelResult
PANEL = {
    **PANEL_BASE,
    "benchmarks": ListOf(str),
    "models_compared": ListOf(str),
    "policies": MapOf(POLICY_NUMBERS),
    "vs_best": Optional(
        MapOf({"against": str, "statistic": str, "mean": Nullable(NUMBER), "ci90": INTERVAL, "runs": int, "state": str})
    ),
    "sizing": Optional({"runs": int, "needed": int, "effect": NUMBER, "floor": int, "cap": int, "pilot": dict}),
}  # RegretPanel
REPORT = {  # ExperimentResult; each panel is checked against its kind's panel_schema
    "name": str,
    "title": str,
    "source": str,
    "claim": str,
    "command": str,
    "scale": str,
    "runs": int,
    "seed": int,
    "seconds": (int, float),
    "kind": Optional(str),
    "figure": Optional(str),
    "settings": Optional(dict),
    "models": MapOf({"key": str, "command": str}),
    "panels": ListOf(dict, nonempty=True),
    "figures": ListOf(str),
}
