"""``demand-prediction``: the observation head's demand predictions against ridge regression on the same
histories (``omgpt evaluate --demand-prediction`` per panel), the claim that the head's error is below
ridge's (by a wider margin for two demand types), and the head's learning curve against training steps
with, where it misses ridge, the steps at which its trend would reach ridge's error."""

from __future__ import annotations

from pathlib import Path

from omgpt.analysis.report import final_demand_errors, steps_to_reach
from omgpt.commands.experiment.config import Panel
from omgpt.commands.experiment.models import _shown
from omgpt.commands.experiment.panels import RELATION, state, versus_words
from omgpt.commands.experiment.registry import Check, Kind, register
from omgpt.commands.experiment.results import PANEL_BASE, ExperimentResult, ModelRecord, PanelResult
from omgpt.records import NUMBER, ListOf, RecordError


class DemandPredictionPanel(PanelResult):
    """The panel's test task and model, and ``omgpt evaluate --demand-prediction``'s summary: each
    method's error after each number of samples ``n`` (no regret numbers: nothing is rolled out for them)."""

    demand_prediction: dict


@register
class DemandPrediction(Kind):
    name = "demand-prediction"
    panel_schema = {
        **PANEL_BASE,
        "demand_prediction": {
            "n": ListOf(NUMBER, nonempty=True),
            "methods": {m: {"mse": ListOf(NUMBER, nonempty=True)} for m in ("omgpt", "ridge")},
        },
    }

    def check_panel(self, panel: DemandPredictionPanel, path: Path, key: str) -> None:
        """Each method's errors, one per number of samples ``n``."""
        report = panel["demand_prediction"]
        for method, numbers in report["methods"].items():
            if len(numbers["mse"]) != len(report["n"]):
                raise RecordError(
                    f"{path}: key '{key}.demand_prediction.methods.{method}.mse': {len(numbers['mse'])} errors "
                    f"for {len(report['n'])} sample counts"
                )

    def evaluate(
        self, panel: Panel, models: dict[str, ModelRecord], *, runs: int, seed: int, device: str
    ) -> DemandPredictionPanel:
        """``omgpt evaluate --demand-prediction`` for one panel; its per-panel files go to a scratch
        folder (the experiment keeps the numbers in experiment.json and draws one figure of all panels)."""
        import tempfile

        from omgpt.commands.evaluate import run_demand_prediction

        with tempfile.TemporaryDirectory() as scratch:
            summary = run_demand_prediction(
                ckpt=models[panel.model]["ckpt"],
                task_options=panel.task_options,
                runs=runs,
                horizon=panel.horizon,
                window=None,
                seed=seed,
                out=scratch,
                task_name=panel.task,
                device=device,
                progress=False,
            )
        return DemandPredictionPanel(
            title=panel.title,
            task=panel.task,
            task_options=panel.task_options,
            horizon=panel.horizon,
            model=panel.model,
            **({"note": panel.note} if panel.note else {}),
            demand_prediction={**summary, "ckpt": _shown(Path(summary["ckpt"]))},
        )

    def figures(self, result: ExperimentResult, out: Path) -> list[Path]:
        from omgpt.analysis.experiment_figures import demand_prediction_figure, obs_learning_curve_figure

        files = [demand_prediction_figure(result["panels"], out / "demand_prediction.png")]
        if any(rec.get("val_obs_mse") for rec in result["models"].values()):
            files.append(obs_learning_curve_figure(result, out / "obs_learning_curve.png"))
        return files

    def headline(self, panel: DemandPredictionPanel) -> str:
        m = panel["demand_prediction"]["methods"]
        n = len(m["omgpt"]["mse"])
        mid = min(9, n - 1)
        paired = head_versus_ridge(panel)
        return (
            f"MSE after {mid + 1} samples: omgpt {m['omgpt']['mse'][mid]:.3g} vs ridge {m['ridge']['mse'][mid]:.3g}; "
            f"after {n}: omgpt {m['omgpt']['mse'][-1]:.3g} vs ridge {m['ridge']['mse'][-1]:.3g}"
            + (
                f"; the head is {RELATION[paired['state']]} ridge: {versus_words(paired)}"
                if paired
                else " (no paired interval: recorded before the per-environment errors were kept)"
            )
        )

    def claims(self, result: ExperimentResult) -> list[Check]:
        rows, wins, single, mixed = [], [], [], []
        for p in result["panels"]:
            m = p["demand_prediction"]["methods"]
            ours, ridge = final_demand_errors(p)
            wins.append(demand_state(p) == "below")
            # a panel testing one type of a model trained on two names it (the single-type model's panel does not)
            (mixed if "demand_types" in p.get("task_options", {}) else single).append(ridge / ours)
            rows.append(
                f"{p['title']}: MSE after {len(m['omgpt']['mse'])} samples {ours:.3g} vs ridge {ridge:.3g} (ridge / head {ridge / ours:.2f})"
            )
        checks = [
            (
                "the observation head's demand prediction error is below ridge regression's (paired 90% interval of their ratio wholly below 1)",
                all(wins),
                "; ".join(rows),
            )
        ]
        if single and mixed:
            checks.append(
                (
                    "by a wider margin for two demand types",
                    min(mixed) > max(single),
                    f"ridge / head: single type {max(single):.2f}, two types {', '.join(f'{v:.2f}' for v in mixed)}",
                )
            )
        return checks

    def sections(self, result: ExperimentResult) -> list[str]:
        """Each model's observation-head error against training steps, and where the head misses ridge
        on a panel, the steps at which the curve's trend would reach ridge's error."""
        curves = {name: rec["val_obs_mse"] for name, rec in result["models"].items() if rec.get("val_obs_mse")}
        if not curves:
            return []
        lines = [
            "## The observation head's learning curve",
            "",
            "Its error after `T - 1` samples on the validation rollouts (`val/obs_mse`, logged at every validation), "
            "against training steps, beside ridge's after `T - 1` samples on the test panels it serves (`obs_learning_curve.png`).",
            "",
        ]
        for name, curve in curves.items():
            rec = result["models"][name]
            served = [p for p in result["panels"] if p["model"] == name]
            ours, ridge = {}, {}
            for p in served:
                ours[p["title"]], ridge[p["title"]] = final_demand_errors(p)
            line = (
                f"* `{name}`: {curve[0][1]:.3g} after {curve[0][0]:,} steps, {curve[-1][1]:.3g} after {curve[-1][0]:,}; on the test panels "
                + ", ".join(f"{t} {ours[t]:.3g} against ridge's {ridge[t]:.3g}" for t in ridge)
                + "."
            )
            missed = [t for t in ridge if ours[t] >= ridge[t]]
            if missed:
                target = min(ridge[t] for t in missed)
                steps, slope, ci = steps_to_reach(curve, target)
                if steps is None:
                    line += f" Over the last half of training the curve does not fall (slope {slope:+.2f} in log-log): more steps of this recipe do not close the gap."
                elif ci is None or ci[1] is None:
                    line += (
                        f" Over the last half of training it falls as steps^{slope:.2f}, but too unevenly to say when it "
                        f"would reach {target:.3g}: the 90% interval of the steps it would take is unbounded (cannot tell)."
                    )
                else:
                    per_step = rec.get("cpu_seconds", rec.get("train_seconds", 0)) / max(1, curve[-1][0])
                    line += (
                        f" Over the last half of training it falls as steps^{slope:.2f}; at that rate it reaches {target:.3g} "
                        f"after ~{steps:,.0f} steps [90%: {ci[0]:,.0f}, {ci[1]:,.0f}], {steps / curve[-1][0]:.0f}x the {curve[-1][0]:,} trained"
                        + (f" (~{_cpu_time(steps * per_step)} at this model's speed)." if per_step else ".")
                    )
            lines.append(line)
        return lines + [""]


def head_versus_ridge(panel: dict) -> dict | None:
    """The head's error after the last sample over ridge's, paired by environment, with its three-state
    verdict (:func:`~omgpt.commands.experiment.panels.state`); None for a panel recorded without it."""
    paired = panel["demand_prediction"].get("head_vs_ridge")
    if paired is None:
        return None
    return {**paired, "statistic": "ratio", "state": state(paired["ci90"], "ratio")}


def demand_state(panel: dict) -> str | None:
    """A demand-prediction panel's verdict: the head *below*, *level* with or *behind* ridge."""
    paired = head_versus_ridge(panel)
    return paired["state"] if paired else None


def _cpu_time(seconds: float) -> str:
    return f"{seconds / 60:.0f} CPU-minutes" if seconds < 7200 else f"{seconds / 3600:.0f} CPU-hours"
