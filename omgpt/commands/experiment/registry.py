"""The experiment kinds of ``omgpt experiment``: the base class every kind extends, and the registry.

A kind is what differs between experiments: how a panel is evaluated, which figures are drawn, each
panel's headline in the report, and the checks of the parts of the paper's claim that go beyond the
per-panel verdict. The base class :class:`Kind` is the plain case -- every policy rolled out, the regret
table and verdict, one regret / suboptimality figure per ``figure_file`` -- and each plug-in in
``omgpt/commands/experiment/kinds/`` overrides what its experiments need and registers itself under a
name with :func:`register`.

A kind reads the resolved experiment's records (:class:`~omgpt.commands.experiment.config.Experiment`,
:class:`~omgpt.commands.experiment.config.Panel`: attributes) and writes and reads the numbers of
``experiment.json`` (:class:`~omgpt.commands.experiment.results.PanelResult` and its kind's extension of
it: JSON mappings, checked against the kind's :attr:`Kind.panel_schema` before a redraw).

An experiment runs the kind its config's ``kind:`` names (``curves`` by default), and nothing else
chooses it: :func:`kind_of`. The same lookup on the ``kind`` of an ``experiment.json`` redraws and
re-renders a finished report.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import ClassVar

from omgpt.commands.experiment.config import Experiment, Panel, parse_policies
from omgpt.commands.experiment.panels import evaluate_panel, verdict
from omgpt.commands.experiment.results import PANEL, ExperimentResult, ModelRecord, PanelResult, RegretPanel, kind_name
from omgpt.errors import OMGPTError
from omgpt.records import RecordError

Check = tuple[str, bool, str]  # (the paper's words, whether they hold, the numbers behind the verdict)

_KINDS: dict[str, Kind] = {}  # name -> the registered kind (built-ins loaded by all_kinds())


class Kind:
    """An experiment kind: subclass it, set ``name``, override what differs, decorate with :func:`register`.
    The defaults are the plain regret comparison (``kind: curves``)."""

    name: ClassVar[str] = ""
    rewards: ClassVar[bool] = False  # also record the optimal policy's expected reward (reward improvement rates)
    panel_schema: ClassVar[dict] = PANEL  # what one of its panels holds in experiment.json (omgpt.records)
    # the keys of the config's ``settings:`` the kind reads (name -> what it declares), fixed before the run
    settings: ClassVar[dict[str, str]] = {}

    def check_settings(self, exp: Experiment) -> None:
        """The config's ``settings:`` holds only keys this kind reads (one line naming the first other)."""
        unknown = sorted(set(exp.settings) - set(self.settings))
        if unknown:
            takes = ", ".join(self.settings) or "none"
            raise OMGPTError(
                f"experiment {exp.name}: settings.{unknown[0]} is not a setting of kind {self.name} ({takes})"
            )

    def check_config(self, exp: Experiment) -> None:
        """What the kind needs of a resolved experiment config beyond its type check, checked before any
        model is trained (one :class:`~omgpt.errors.OMGPTError` line; default: nothing)."""

    def evaluate(
        self, panel: Panel, models: dict[str, ModelRecord], *, runs: int, seed: int, device: str
    ) -> PanelResult:
        """One panel's numbers for ``experiment.json``: ``runs`` test environments of ``seed``, evaluated
        on ``device``, each model of ``models`` (name -> its record) acting with its ``ckpt``."""
        return self.rollout(panel, models, runs=runs, seed=seed, device=device)[0]

    def evaluate_with_state(
        self, panel: Panel, models: dict[str, ModelRecord], *, runs: int, seed: int, device: str
    ) -> tuple[PanelResult, object]:
        """:meth:`evaluate`, and what :meth:`finish` needs from this panel beyond its numbers (JSON-able:
        the panel store keeps it as JSON, arrays as lists; default ``None``). Panels may be evaluated in
        other processes and read back from the panel store, so a kind keeps nothing across panels on
        ``self``: it returns it here."""
        return self.evaluate(panel, models, runs=runs, seed=seed, device=device), None

    def finish(self, panels: list[PanelResult], states: list, *, seed: int) -> list[PanelResult]:
        """The panels' numbers once every panel is evaluated, with what needs several panels (their
        states from :meth:`evaluate_with_state`, in the config's order); default: as they are."""
        return panels

    def rollout(
        self, panel: Panel, models: dict[str, ModelRecord], *, runs: int, seed: int, device: str
    ) -> tuple[RegretPanel, dict]:
        """Every policy of the panel played on ``runs`` test environments: ``(numbers, histories)`` -- the
        regret table's numbers (with the panel's ``figure_file``) and each policy's history, for kinds
        that measure more on the same rollouts."""
        numbers, histories = evaluate_panel(panel, models, runs=runs, seed=seed, device=device, rewards=self.rewards)
        numbers["figure_file"] = panel.figure_file
        return numbers, histories

    def figures(self, result: ExperimentResult, out: Path) -> list[Path]:
        """Draw the figures of ``result`` into ``out``; returns their paths. Default: regret (top) and
        suboptimality (bottom) per panel, one PNG per ``figure_file`` of the panels."""
        from omgpt.analysis.experiment_figures import curves_figure

        groups: dict[str, list[PanelResult]] = {}
        for panel in result["panels"]:
            groups.setdefault(panel.get("figure_file", "curves"), []).append(panel)
        return [curves_figure(group, out / f"{name}.png") for name, group in groups.items()]

    def size(self, panel: Panel, models: dict[str, ModelRecord], *, floor: int, cap: int, device: str) -> dict | None:
        """How many test runs ``panel`` plays (:func:`~omgpt.commands.experiment.panels.size_runs`: a
        pilot on validation environments resolving the panel's ``effect``), or None to play the
        experiment's ``runs`` -- where the panel names no effect or compares no model with a benchmark.
        A kind whose panels play a data set's fixed windows returns None."""
        from omgpt import seeding
        from omgpt.commands.experiment.panels import NOT_BENCHMARKS, size_runs

        names = [p for p, _ in parse_policies(panel.policies, panel.model).values()]
        if panel.effect is None or "omgpt" not in names or all(n in NOT_BENCHMARKS for n in names):
            return None
        return size_runs(
            panel, models, effect=panel.effect, floor=floor, cap=cap, seed=seeding.PILOT_SEED, device=device
        )

    def headline(self, panel: PanelResult) -> str:
        """The panel's one line in the report and on the console (default: the verdict, or nothing)."""
        return verdict(panel) or ""

    def claims(self, result: ExperimentResult) -> list[Check]:
        """The parts of the paper's claim beyond the per-panel verdict, each checked (default: none)."""
        return []

    def sections(self, result: ExperimentResult) -> list[str]:
        """Report lines of the kind's own, after the claim checks and before the panels (default: none)."""
        return []

    def check_panel(self, panel: PanelResult, path: Path, key: str) -> None:
        """What :attr:`panel_schema` cannot say, checked before a redraw (``key``: the panel's, for the
        error): policies to compare, curves of ``horizon`` steps, and every policy named in the panel
        (its benchmarks, its models, any mapping by policy) one of its ``policies``."""
        policies, horizon = panel["policies"], panel["horizon"]
        if not policies:
            raise RecordError(f"{path}: key '{key}.policies': is empty")
        for label, numbers in policies.items():
            for curve, values in numbers["curves"].items():
                where = f"{key}.policies.{label}.curves.{curve}"
                if (
                    len(values["mean"]) != horizon
                    or len(values["band90"]) != 2
                    or any(len(b) != horizon for b in values["band90"])
                ):
                    raise RecordError(
                        f"{path}: key {where!r}: expected curves of the panel's {horizon} steps, got "
                        f"{len(values['mean'])} (band90: {[len(b) for b in values['band90']]})"
                    )
        for field in ("benchmarks", "models_compared"):
            for label in panel[field]:
                if label not in policies:
                    raise RecordError(f"{path}: key '{key}.{field}': {label!r} is not one of the panel's policies")
        _by_policy(panel, set(policies), path, key)


def _by_policy(panel: RegretPanel, labels: set, path: Path, key: str) -> None:
    """A mapping of the panel whose keys name some of its policies (its costs by policy, its tuned
    constants) names only them: a policy present there alone would be drawn, or ranked, as one."""
    for field, value in panel.items():
        if field != "policies" and isinstance(value, dict) and labels & value.keys():
            others = sorted(set(value) - labels)
            if others:
                raise RecordError(
                    f"{path}: key '{key}.{field}': {others[0]!r} is not one of the panel's policies ({', '.join(sorted(labels))})"
                )


def register(kind: type[Kind]) -> type[Kind]:
    """Class decorator: make ``kind`` available under ``kind.name``."""
    if not kind.name or kind.name in _KINDS:
        raise ValueError(f"experiment kind {kind.__name__}: name {kind.name!r} is empty or registered already")
    _KINDS[kind.name] = kind()
    return kind


def all_kinds() -> dict[str, Kind]:
    """Every registered kind by name; the first call imports the plug-ins (every module of ``kinds/``),
    so a new kind is one new file there and nothing else to edit."""
    import omgpt.commands.experiment.kinds as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    return _KINDS


def kind_of(experiment: Experiment | ExperimentResult) -> Kind:
    """The kind of an experiment -- a resolved config or an ``experiment.json``: the one its ``kind``
    names (an ``experiment.json`` written before the rename: its ``figure``)."""
    registered = all_kinds()
    if isinstance(experiment, Experiment):
        name, chosen = experiment.name, experiment.kind
    else:
        name, chosen = experiment["name"], kind_name(experiment)
    kind = registered.get(chosen)
    if kind is None:
        raise OMGPTError(
            f"experiment {name!r}: no experiment kind {chosen!r} (registered: {', '.join(sorted(registered))})"
        )
    return kind


def draw(result: ExperimentResult, out: Path) -> list[str]:
    """Draw every figure of ``result``'s kind into ``out``; returns their paths relative to ``out``."""
    return [str(Path(f).relative_to(out)) for f in kind_of(result).figures(result, out)]
