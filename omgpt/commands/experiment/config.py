"""``omgpt experiment``'s configs: ``configs/experiments/NAME.yaml`` resolved at a scale, then parsed and
type-checked by jsonargparse (the parser LightningCLI uses) into the typed records below.

An experiment names the models it trains and the panels it draws; any mapping may hold ``cpu:`` /
``paper:`` keys whose contents override its siblings at that scale (:func:`at_scale`, applied before
parsing). Two sets of records: the config as written (:class:`ExperimentSpec`, :class:`ModelSpec`,
:class:`PanelSpec`: what jsonargparse checks, defaults included) and the experiment resolved from it
(:class:`Experiment`, :class:`Model`, :class:`Panel`: every model's horizon, every panel's test task,
options, horizon, policies and tuning setting filled in), which :func:`load_experiment` returns and the
rest of the package reads. A panel's *numbers* are another record
(:class:`~omgpt.commands.experiment.results.PanelResult`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from jsonargparse import ArgumentParser
from jsonargparse.typing import PositiveFloat, PositiveInt

from omgpt.commands.args import one_line
from omgpt.errors import OMGPTError
from omgpt.records import RecordError, read_yaml
from omgpt.resources import CONFIGS
from omgpt.policies.tuned import with_tuned_variants
from omgpt.tuning import setting_key

EXPERIMENTS = CONFIGS / "experiments"
SCALES = {"cpu": CONFIGS / "scale" / "cpu.yaml", "paper": CONFIGS / "scale" / "paper.yaml"}
# the built-in kinds a config's ``kind:`` names (a plug-in registers more: kind_of checks the name)
KIND_NAMES = (
    "curves", "prior-benefit", "advantage", "model-size", "alg-star-match", "demand-prediction", "real-demand",
    "beyond-alg-star",
)  # fmt: skip


@dataclass
class ModelSpec:
    """One ``omgpt fit`` run: a task, its options, a horizon (default: the experiment's), extra fit
    arguments (``{"model.network.n_layer": 2}``) and extra config files layered on the scale's. ``pretrained``
    names a shipped reference model (``pretrained/NAME``, trained with the CPU recipe) that stands in
    for the run: its task, options and horizon must be the spec's. Quick runs (``--horizon``,
    ``--fit-config``) train as usual. ``init_from`` names another model of the experiment (of the same
    task, options and horizon) whose kept weights this fit starts from (``--model.finetune.init_from``: the
    regret fine-tuning of docs/finetune.md); that model is trained first."""

    task: str
    task_options: dict[str, Any] = field(default_factory=dict)
    horizon: Optional[PositiveInt] = None
    args: dict[str, Any] = field(default_factory=dict)
    configs: list[str] = field(default_factory=list)
    pretrained: Optional[str] = None
    init_from: Optional[str] = None


@dataclass
class PanelSpec:
    """One evaluation: ``model`` (a model of the experiment) and ``policies`` on a test task -- the
    model's unless ``task`` is given, with ``task_options`` over the model's and the horizon
    ``horizon_factor`` times the model's. ``omgpt@NAME`` in ``policies`` is another model, labelled NAME.
    ``note``: what was measured about the panel -- where OMGPT is not below the best benchmark, why and
    what would close the gap; where a model was retrained, what chose its recipe and what a missed goal
    would take (shown under the panel in the report)."""

    title: str
    model: str
    policies: list[str] = field(default_factory=list)
    task: Optional[str] = None
    task_options: dict[str, Any] = field(default_factory=dict)
    horizon_factor: PositiveFloat = 1
    figure_file: Optional[str] = None
    grid: Optional[dict[str, int]] = None
    note: str = ""  # what was measured about the panel, shown under it in the report
    effect: Optional[PositiveFloat] = None  # the experiment's effect, for this panel


@dataclass
class ExperimentSpec:
    """``configs/experiments/NAME.yaml`` at one scale. ``kind``: the experiment kind that evaluates and
    reports it (:func:`omgpt.commands.experiment.registry.kind_of`: this field alone chooses it); also
    the figure file of panels that name none.
    ``settings``: what the kind is told before the run and never derives from test numbers -- which
    panels each claim is about, a model-selection rule (the keys its :attr:`Kind.settings` names).
    ``effect``: the gap a panel's verdict must resolve, a fraction of the best benchmark's regret (a
    panel may name its own): each panel's test runs are then sized by a pilot on validation
    environments (:func:`~omgpt.commands.experiment.panels.size_runs`), at least ``runs`` and at most
    ``max_runs``; without it every panel plays ``runs``."""

    title: str
    models: dict[str, ModelSpec]
    panels: list[PanelSpec]
    source: str = ""
    claim: str = ""
    kind: str = "curves"
    horizon: Optional[PositiveInt] = None
    runs: PositiveInt = 100
    effect: Optional[PositiveFloat] = None
    max_runs: PositiveInt = 5000
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Model:
    """A model of a resolved experiment: a :class:`ModelSpec` with its horizon decided (its own, else
    the experiment's; a quick run's ``--horizon`` over both) and ``pretrained`` dropped for quick runs."""

    task: str
    horizon: int
    task_options: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    configs: list[str] = field(default_factory=list)
    pretrained: Optional[str] = None
    init_from: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class Panel:
    """A panel of a resolved experiment: what one evaluation plays, and on what. ``policies`` are the
    config's entries with every tunable benchmark's ``-tuned`` variant added (``omgpt@NAME``: another
    model, labelled NAME: :func:`parse_policies`); ``task``, ``task_options`` and ``horizon`` are the
    test task's (the model's, the config's options over the model's, its horizon times
    ``horizon_factor``). The ``-tuned`` benchmarks play the constants tuned on ``tuned_on``, the setting
    key of ``tuned_task`` / ``tuned_options`` at ``horizon``: the prior the model was trained on (a
    distribution shift keeps the unshifted prior's constants, docs/protocol.md). ``figure_file``: the
    figure the panel is drawn in (default: the experiment's kind); ``grid`` and ``note``: the config's;
    ``settings``: the experiment's (what its kind declares before the run, e.g. a selection rule)."""

    title: str
    model: str
    policies: list[str]
    task: str
    task_options: dict[str, Any]
    horizon: int
    tuned_task: str
    tuned_options: dict[str, Any]
    tuned_on: str
    figure_file: str = "curves"
    grid: Optional[dict[str, int]] = None
    note: str = ""
    effect: Optional[float] = None  # the gap its runs are sized to resolve (its own, else the experiment's)
    settings: dict[str, Any] = field(default_factory=dict)

    def episode_task(self):
        """The test task at the panel's horizon (:func:`omgpt.tasks.make_episode_task`)."""
        from omgpt.tasks import make_episode_task

        return make_episode_task(self.task, self.task_options, self.horizon)


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """``configs/experiments/NAME.yaml`` resolved at ``scale`` (:func:`load_experiment`): its models by
    name and its panels, each in the config's order (:func:`dependency_order`: the models parents first).
    ``kind``: the config's (:class:`ExperimentSpec`)."""

    name: str
    scale: str
    title: str
    models: dict[str, Model]
    panels: list[Panel]
    source: str = ""
    claim: str = ""
    kind: str = "curves"
    runs: int = 100
    max_runs: int = 5000
    settings: dict[str, Any] = field(default_factory=dict)


def _parser() -> ArgumentParser:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--experiment", type=ExperimentSpec)
    return parser


def catalogue() -> tuple[dict[str, str], list[RecordError]]:
    """Experiment name -> its title, for every config that reads, and the error of each that does not
    (a malformed or binary file: ``--list`` shows the others and names it)."""
    titles, errors = {}, []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        try:
            titles[path.stem] = read_yaml(path, {"title": str}, what="experiment config")["title"]
        except RecordError as e:
            errors.append(e)
    return titles, errors


def available() -> dict[str, str]:
    """Experiment name -> its title; a config that does not read is one line naming it."""
    titles, errors = catalogue()
    if errors:
        raise errors[0]
    return titles


def at_scale(node, scale: str):
    """Resolve the ``cpu:`` / ``paper:`` overrides of every mapping in ``node`` for ``scale``."""
    if isinstance(node, list):
        return [at_scale(v, scale) for v in node]
    if not isinstance(node, dict):
        return node
    resolved = {k: at_scale(v, scale) for k, v in node.items() if k not in SCALES}
    override = node.get(scale)
    return _merge(resolved, at_scale(override, scale)) if override else resolved


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_experiment(data: dict, source: str = "experiment") -> ExperimentSpec:
    """A scale-resolved experiment mapping -> :class:`ExperimentSpec`, type-checked by jsonargparse
    (an unknown key, a missing title or a wrong type is one line naming the key)."""
    if isinstance(data, dict) and "figure" in data:  # the key's name until it said what it selects
        raise OMGPTError(
            f"{source}: 'figure' is now 'kind' (the experiment kind that evaluates and reports it): write 'kind: {data['figure']}'"
        )
    parser = _parser()
    try:
        config = parser.parse_object({"experiment": data})
        spec = parser.instantiate_classes(config).experiment
    except Exception as e:  # jsonargparse's ArgumentError / a constructor's TypeError
        raise OMGPTError(f"{source}: {one_line(str(e)).replace('experiment.', '')}") from None
    return spec


def load_experiment(name: str, scale: str, *, horizon: int | None = None) -> Experiment:
    """The experiment ``name`` resolved at ``scale``: every model and panel with its task, options and
    horizon filled in. ``horizon`` overrides the experiment's (for quick runs). A config that does not
    parse, or whose models and panels do not fit together, is one :class:`OMGPTError` line."""
    path = EXPERIMENTS / f"{name}.yaml"
    if not path.is_file():
        names = ", ".join(p.stem for p in sorted(EXPERIMENTS.glob("*.yaml")))
        raise OMGPTError(f"unknown experiment {name!r}; available: {names} (omgpt experiment --list)")
    if scale not in SCALES:
        raise OMGPTError(f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
    spec = parse_experiment(at_scale(read_yaml(path, {}, what="experiment config"), scale), str(path))
    models = {model_name: _model(model_name, m, spec, horizon, path) for model_name, m in spec.models.items()}
    dependency_order(models, str(path))
    for model_name, m in models.items():
        parent = models.get(m.init_from)
        if parent is not None and (parent.task, parent.task_options, parent.horizon) != (
            m.task,
            m.task_options,
            m.horizon,
        ):
            raise OMGPTError(
                f"{path}: model {model_name!r} starts from {m.init_from!r}, a model of another task, options or horizon"
            )
    panels = [_panel(p, models, spec.kind, path, spec.settings, spec.effect) for p in spec.panels]
    return Experiment(
        name=name,
        scale=scale,
        title=spec.title,
        models=models,
        panels=panels,
        source=spec.source,
        claim=spec.claim,
        kind=spec.kind,
        runs=spec.runs,
        max_runs=spec.max_runs,
        settings=dict(spec.settings),
    )


def _model(name: str, spec: ModelSpec, experiment: ExperimentSpec, horizon: int | None, path) -> Model:
    """A model spec resolved: its horizon (a quick run's, else its own, else the experiment's); a quick
    run at another horizon than any reference model's trains instead of using one."""
    resolved = horizon or spec.horizon or experiment.horizon
    if not resolved:
        raise OMGPTError(f"{path}: model {name!r} needs a horizon (its own or the experiment's)")
    return Model(
        task=spec.task,
        horizon=resolved,
        task_options=dict(spec.task_options),
        args=dict(spec.args),
        configs=list(spec.configs),
        pretrained=None if horizon else spec.pretrained,
        init_from=spec.init_from,
    )


def _panel(spec: PanelSpec, models: dict[str, Model], kind: str, path, settings: dict, effect: float | None) -> Panel:
    """A panel spec resolved against the experiment's models (:class:`Panel`)."""
    model = models.get(spec.model)
    if model is None:
        raise OMGPTError(f"{path}: panel {spec.title!r} names no model of this experiment")
    task_options = {**model.task_options, **spec.task_options}
    horizon = int(model.horizon * spec.horizon_factor)
    # The benchmarks' constants are tuned on the prior OMGPT was trained on, at the panel's horizon
    # (docs/protocol.md): a shifted test task plays the constants of the unshifted prior.
    chosen = {k: v for k, v in task_options.items() if k in _evaluation_options(model.task)}  # not a shift
    tuned_options = {**model.task_options, **chosen}
    panel = Panel(
        title=spec.title,
        model=spec.model,
        policies=with_tuned_variants(spec.policies),
        task=spec.task or model.task,
        task_options=task_options,
        horizon=horizon,
        tuned_task=model.task,
        tuned_options=tuned_options,
        tuned_on=setting_key(model.task, tuned_options, horizon),
        figure_file=spec.figure_file or kind,
        grid=spec.grid,
        note=spec.note,
        effect=spec.effect or effect,
        settings=dict(settings),
    )
    for label, (policy, model_name) in parse_policies(panel.policies, panel.model).items():
        if model_name is not None and model_name not in models:
            raise OMGPTError(f"{path}: panel {panel.title!r} policy {label!r} names an unknown model")
    return panel


def dependency_order(models: Mapping[str, Model], source: str = "experiment") -> list[str]:
    """The names of ``models`` with every model after the one it starts from (``init_from``), otherwise
    in their own order; an ``init_from`` that names no model of ``models``, or a cycle, is one line."""
    order: list[str] = []
    for name in models:
        chain = [name]
        while (parent := models[chain[-1]].init_from) is not None and parent not in order:
            if parent not in models:
                raise OMGPTError(
                    f"{source}: model {chain[-1]!r} has init_from {parent!r}, which names no model of this experiment"
                )
            if parent in chain:
                raise OMGPTError(
                    f"{source}: init_from makes a cycle ({' -> '.join(chain[chain.index(parent) :] + [parent])}): no model of it can be trained first"
                )
            chain.append(parent)
        order += [n for n in reversed(chain) if n not in order]
    return order


def parse_policies(entries: list[str], default_model: str) -> dict[str, tuple[str, str | None]]:
    """Policy entries -> ``label -> (policy name, model name or None)``. ``omgpt`` is the panel's
    model; ``omgpt@NAME`` is another model of the experiment, labelled ``NAME``."""
    out = {}
    for entry in entries:
        policy, _, model = entry.partition("@")
        if policy == "omgpt":
            out[model or "omgpt"] = ("omgpt", model or default_model)
        else:
            out[policy] = (policy, None)
    return out


def _evaluation_options(task_name: str) -> tuple[str, ...]:
    from omgpt.tasks import TASKS

    factory = TASKS.get(task_name)
    return factory.cls.evaluation_options if factory is not None else ()
