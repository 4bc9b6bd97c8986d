"""``beyond-alg-star`` (docs/finetune.md): per setting, the supervised OMGPT, the same model
fine-tuned on the regret of its own rollouts (a model of the experiment whose ``init_from`` is the
supervised one, fitted with ``configs/finetune/regret.yaml``), ``alg-star`` and the benchmarks (the
paper's and the tuned constants), all on the same test environments (common random numbers).

Each panel adds, from the final regrets of those environments (paired: the environments are resampled
together, :func:`omgpt.analysis.report.paired_ratio` / :func:`~omgpt.analysis.report.paired_difference`):

* fine-tuned / best benchmark (the best chosen on validation, as every panel's), with its 90% interval:
  the verdict is *below the best benchmark* when the whole interval lies below 1; beside it fine-tuned −
  best benchmark, which stays defined where the ratio does not (queueing's regret can be negative);
* fine-tuned / ``alg-star`` (the panel's ``ratio_to_alg_star``) and fine-tuned − supervised;
* which of the two is *kept*: fine-tuning is part of the procedure only where it wins on validation --
  both models play the same environments of the validation seed the config's ``settings.selection``
  declares (``{runs, seed}``: not the fits' own seed, which chose their checkpoints, nor one that tuned
  the fine-tuning recipe), and the one of lower mean final regret is kept (the fit's checkpoint rule,
  with the starting point among the candidates). The verdicts are the kept model's; the fine-tuned
  model's own test numbers are reported beside them;
* the cost of fine-tuning beside that of pre-training (each fit's CPU time and steps, from the models'
  records) and the fine-tuning's validation curve, for the figure of validation regret against
  CPU-minutes of fine-tuning.

Everything the report says is in ``experiment.json`` (``panels[i].finetuning``, ``settings``), so
``--redraw`` needs nothing else. The claims are about the panels the config's
``settings.claims.alg_star_beaten`` names (by their model), declared before any test number is seen: there
the kept model is below the best benchmark; in the other panels the kept model is not worse than the
supervised one. The test numbers never move a panel from one claim to the other; where they disagree
with the declaration (the best benchmark not below ``alg-star`` in a named panel), the report says so.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from omgpt.analysis.report import best_benchmark, final_regrets, interval, paired_difference, paired_ratio
from omgpt.commands.experiment.config import Experiment, Panel, parse_policies
from omgpt.commands.experiment.panels import NOT_BENCHMARKS
from omgpt.commands.experiment.registry import Check, Kind, register
from omgpt.commands.experiment.results import INTERVAL, PANEL, ExperimentResult, ModelRecord, RegretPanel
from omgpt.errors import OMGPTError
from omgpt.records import NUMBER, ListOf, Nullable, RecordError

SUPERVISED = "omgpt"  # the panel's own model: the supervised one
PAIRED = {"mean": Nullable(NUMBER), "ci90": INTERVAL, "runs": int}
DIFFERENCE = {"mean": NUMBER, "ci90": INTERVAL, "runs": int}
FIT = {"label": str, "model": str, "key": str, "steps": int, "seconds": NUMBER, "best_val_regret": NUMBER}
SELECTION = {
    "runs": int,
    "seed": int,
    "supervised": NUMBER,
    "finetuned": NUMBER,
    "finetuned_minus_supervised": DIFFERENCE,
    "kept": str,
}
FINETUNING = {
    "versus_best": PAIRED, "supervised_versus_best": PAIRED, "minus_supervised": DIFFERENCE, "minus_best": DIFFERENCE,
    "supervised": FIT, "finetuned": {**FIT, "val_regret": ListOf(ListOf(NUMBER), nonempty=True)},
    "selection": SELECTION, "kept_versus_best": PAIRED, "kept_minus_supervised": DIFFERENCE,
}  # fmt: skip


class BeyondAlgStarPanel(RegretPanel):
    """A regret panel with the fine-tuning's numbers (:data:`FINETUNING`: paired ratios and differences,
    each fit's cost)."""

    finetuning: dict


@register
class BeyondAlgStar(Kind):
    name = "beyond-alg-star"
    panel_schema = {**PANEL, "best_benchmark": {"name": str}, "finetuning": FINETUNING}
    settings = {
        "claims": "{alg_star_beaten: [MODEL, ...]}: the panels (by model) where a tuned benchmark beats alg-star",
        "selection": "{runs, seed}: the validation environments that decide whether the fine-tuned model is kept",
    }

    def check_config(self, exp: Experiment) -> None:
        """The declared settings (:attr:`settings`, both required); each panel plays its (supervised) model
        as ``omgpt``, exactly one other model -- one that starts from the panel's (``init_from``) --
        ``alg-star`` and at least one benchmark."""
        check_declared(exp)
        for panel in exp.panels:
            played = parse_policies(panel.policies, panel.model)
            others = [m for label, (p, m) in played.items() if p == "omgpt" and label != SUPERVISED]
            where = f"experiment {exp.name}: panel {panel.title!r}"
            if SUPERVISED not in played or "alg-star" not in played or len(others) != 1:
                raise OMGPTError(
                    f"{where}: plays omgpt (the supervised model), exactly one omgpt@NAME (its fine-tuned model) and alg-star"
                )
            if exp.models[others[0]].init_from != panel.model:
                raise OMGPTError(
                    f"{where}: omgpt@{others[0]} does not start from the panel's model {panel.model!r} (its init_from)"
                )
            if all(p in NOT_BENCHMARKS for p, _ in played.values()):
                raise OMGPTError(f"{where}: plays no benchmark")

    def evaluate(
        self, panel: Panel, models: dict[str, ModelRecord], *, runs: int, seed: int, device: str
    ) -> BeyondAlgStarPanel:
        numbers, histories = self.rollout(panel, models, runs=runs, seed=seed, device=device)
        [finetuned] = [label for label in numbers["models_compared"] if label != SUPERVISED]
        finals = {label: h.cumulative_regret()[:, -1].double().numpy() for label, h in histories.items()}
        selection = select_on_validation(panel, models, finetuned, device, **panel.settings["selection"])
        kept, best = selection["kept"], numbers["best_benchmark"]["name"]
        return BeyondAlgStarPanel(
            **numbers,
            finetuning={
                **finetuning_numbers(finals, finetuned, best),
                "selection": selection,
                "kept_versus_best": paired_ratio(finals[kept], finals[best]),
                "kept_minus_supervised": paired_difference(finals[kept], finals[SUPERVISED]),
                "supervised": {"label": SUPERVISED, **fit_cost(panel.model, models[panel.model])},
                "finetuned": {
                    "label": finetuned,
                    **fit_cost(finetuned, models[finetuned]),
                    "val_regret": models[finetuned]["val_regret"],
                },
            },
        )

    def check_panel(self, panel: BeyondAlgStarPanel, path: Path, key: str) -> None:
        """The regret panel's checks, and every label the fine-tuning numbers name one of its policies."""
        super().check_panel(panel, path, key)
        f = panel["finetuning"]
        named = {
            "finetuning.supervised.label": f["supervised"]["label"],
            "finetuning.finetuned.label": f["finetuned"]["label"],
            "finetuning.selection.kept": f["selection"]["kept"],
            "best_benchmark.name": panel["best_benchmark"]["name"],
            "policies": "alg-star",
        }
        for field, label in named.items():
            if label not in panel["policies"]:
                raise RecordError(f"{path}: key '{key}.{field}': {label!r} is not one of the panel's policies")
        if f["finetuned"]["steps"] <= 0 or any(len(point) != 2 for point in f["finetuned"]["val_regret"]):
            raise RecordError(
                f"{path}: key '{key}.finetuning.finetuned': expected steps > 0 and a curve of [step, regret] points"
            )

    def figures(self, result: ExperimentResult, out: Path) -> list[Path]:
        from omgpt.analysis.experiment_figures import curves_figure, finetuning_figure

        return [
            finetuning_figure(result["panels"], out / "finetuning.png"),
            curves_figure(result["panels"], out / "regret.png", max_cols=3),
        ]

    def headline(self, panel: BeyondAlgStarPanel) -> str:
        f, finals = panel["finetuning"], final_regrets(panel)
        ft = f["finetuned"]["label"]
        return (
            f"fine-tuned {finals[ft]:.2f} against supervised {finals[SUPERVISED]:.2f} "
            f"(difference {_difference(f['minus_supervised'])}, {_change(f['minus_supervised'])}); {kept_line(panel)}; {verdict_line(panel)}"
        )

    def claims(self, result: ExperimentResult) -> list[Check]:
        if "settings" not in result:
            raise RecordError(f"{result['name']}: experiment.json names no settings.claims (run it again)")
        named = set(result["settings"]["claims"]["alg_star_beaten"])
        beaten = [p for p in result["panels"] if p["model"] in named]
        rest = [p for p in result["panels"] if p["model"] not in named]
        checks = []
        if beaten:
            rows = []
            for p in beaten:
                finals, (best, bench) = final_regrets(p), best_benchmark(p)
                agrees = "" if bench < finals["alg-star"] else " (on these test environments it does not beat alg-star)"
                rows.append(
                    f"{p['title']}: {best} {bench:.2f} against alg-star {finals['alg-star']:.2f}{agrees}; "
                    f"kept {p['finetuning']['selection']['kept']} / {best} {_ratio(p['finetuning']['kept_versus_best'])}"
                )
            checks.append(
                (
                    "where a tuned benchmark beats alg-star (the panels the config declares: "
                    + ", ".join(p["title"] for p in beaten)
                    + "), the kept OMGPT (fine-tuned where validation kept it) is below the best benchmark "
                    "(the paired 90% interval of their ratio lies below 1)",
                    all(below_best(p) for p in beaten),
                    f"{sum(below_best(p) for p in beaten)} of {len(beaten)} panels; " + "; ".join(rows),
                )
            )
        if rest:
            rows = [
                f"{p['title']}: kept {p['finetuning']['selection']['kept']}, kept − supervised "
                f"{_difference(p['finetuning']['kept_minus_supervised'])} (the fine-tuned model's own: "
                f"{_difference(p['finetuning']['minus_supervised'])}), kept / alg-star "
                f"{_ratio(p['policies'][p['finetuning']['selection']['kept']]['ratio_to_alg_star'])}"
                for p in rest
            ]
            checks.append(
                (
                    "elsewhere fine-tuning, kept only where it wins on validation, does not make OMGPT worse (the paired 90% "
                    "interval of kept − supervised is not above 0)",
                    not any(worse(p) for p in rest),
                    f"{sum(not worse(p) for p in rest)} of {len(rest)} panels; " + "; ".join(rows),
                )
            )
        return checks

    def sections(self, result: ExperimentResult) -> list[str]:
        panels = result["panels"]
        runs = panels[0]["finetuning"]["minus_supervised"]["runs"]
        selection = panels[0]["finetuning"]["selection"]
        lines = [
            "## Fine-tuning on regret",
            "",
            f"Mean final regret on the {runs:,} test environments of each setting; every ratio and difference is paired "
            "(the same environments for both policies, resampled together: bootstrap 90% interval). The best benchmark "
            "is the one of lowest validation regret (each panel below says on which environments). The kept model: the "
            f"fine-tuned one where it beat the supervised one on {selection['runs']:,} validation environments (seed "
            f"{selection['seed']:,}, declared in the config; the fits chose their checkpoints on seed 10,000), else the "
            "supervised one. Below the best "
            "benchmark: the whole interval of kept / best lies below 1.",
            "",
            "| setting | supervised | fine-tuned | alg-star | best benchmark | fine-tuned / best [paired 90% CI] | "
            "fine-tuned − best [paired 90% CI] | fine-tuned / alg-star [paired 90% CI] | fine-tuned − supervised [paired 90% CI] | "
            "validation: fine-tuned − supervised [paired 90% CI] | kept | kept below the best benchmark |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in panels:
            f, finals, (best, bench) = p["finetuning"], final_regrets(p), best_benchmark(p)
            ft, sel = f["finetuned"]["label"], f["selection"]
            lines.append(
                f"| {p['title']} | {finals[SUPERVISED]:.2f} | {finals[ft]:.2f} | {finals['alg-star']:.2f} | {best} {bench:.2f} | "
                f"{_ratio(f['versus_best'])} | {_difference(f['minus_best'])} | {_ratio(p['policies'][ft]['ratio_to_alg_star'])} | "
                f"{_difference(f['minus_supervised'])} | {_difference(sel['finetuned_minus_supervised'])} | "
                f"{'fine-tuned' if sel['kept'] == ft else 'supervised'} | {'**yes**' if below_best(p) else 'no'} |"
            )
        lines += [
            "",
            "What fine-tuning cost beside pre-training: each fit's CPU-minutes on one thread (its logged CPU time where "
            "it has one, else its one-thread wall-clock; a shipped reference model's from its card) and steps; the "
            "validation regret of each kept checkpoint (each on its own fit's validation environments).",
            "",
            "| setting | pre-training: steps, CPU-minutes | fine-tuning: steps, CPU-minutes | CPU-seconds per fine-tuning step | "
            "fine-tuning / pre-training | validation regret: supervised -> fine-tuned |",
            "|---|---|---|---|---|---|",
        ]
        for p in panels:
            sup, ft = p["finetuning"]["supervised"], p["finetuning"]["finetuned"]
            lines.append(
                f"| {p['title']} | {sup['steps']:,}, {sup['seconds'] / 60:.1f} | {ft['steps']:,}, {ft['seconds'] / 60:.1f} | "
                f"{ft['seconds'] / ft['steps']:.2f} | {ft['seconds'] / sup['seconds']:.1%} | "
                f"{sup['best_val_regret']:.2f} -> {ft['best_val_regret']:.2f} |"
            )
        lines += [
            "",
            "`finetuning.png`: each fine-tuning's validation regret against its CPU-minutes (the steps at the fit's mean "
            "CPU-seconds per step), from the supervised model's validation regret at 0; `regret.png`: the test regret curves.",
            "",
        ]
        return lines + not_below_section(panels)


def not_below_section(panels: list[dict]) -> list[str]:
    """Where the kept model is not below the best benchmark, why, from the panel's own numbers: one
    episode's final regret spreads over a 90% band far wider than the gap to close, so the fine-tuning's
    gradient (estimated from a few dozen episodes a step) and its validation (a few hundred) cannot see
    it; and what would close it (docs/finetune.md, "First measured attempt", measures the estimator)."""
    missed = [p for p in panels if not below_best(p)]
    if not missed:
        return []
    lines = ["## Where the kept model is not below the best benchmark", ""]
    for p in missed:
        f, finals, (best, bench) = p["finetuning"], final_regrets(p), best_benchmark(p)
        kept, ft = f["selection"]["kept"], f["finetuned"]["label"]
        low, high = p["policies"][kept]["final_regret"]["band90"]
        lines.append(
            f"* {p['title']}: kept {kept} {finals[kept]:.2f} against {best} {bench:.2f}, a gap of {finals[kept] - bench:+.2f}, while "
            f"one episode's final regret spreads over [{low:.1f}, {high:.1f}] (90% of the test episodes): the gap is "
            f"{abs(finals[kept] - bench) / (high - low):.1%} of that spread. A fine-tuning step estimates its gradient from "
            "a few dozen episodes and its validation reads a few hundred, so the signal is lost in the episodes' own noise; "
            f"the fine-tuned model ({ft}: {finals[ft]:.2f}) {_moved(f['minus_supervised'])}. What would close it: far more episodes per "
            "step (thousands, not 64), a baseline that removes the episode's own noise (the return of other rollouts from the "
            "same state), a stochastic head native to the action grid, and validation on a few thousand paired environments "
            '(docs/finetune.md, "First measured attempt").'
        )
    return lines + [""]


def finetuning_numbers(finals: dict[str, np.ndarray], finetuned: str, best: str) -> dict:
    """From each policy's final regret per test environment (entry ``i``: environment ``i`` for every
    policy): fine-tuned / best benchmark, supervised / best benchmark (paired ratios), fine-tuned −
    supervised and fine-tuned − best benchmark (paired differences), each with its paired bootstrap 90%
    interval."""
    return {
        "versus_best": paired_ratio(finals[finetuned], finals[best]),
        "supervised_versus_best": paired_ratio(finals[SUPERVISED], finals[best]),
        "minus_supervised": paired_difference(finals[finetuned], finals[SUPERVISED]),
        "minus_best": paired_difference(finals[finetuned], finals[best]),
    }


def fit_cost(name: str, record: ModelRecord) -> dict:
    """A model's training as the report shows it: steps, seconds -- the fit's CPU time where its log
    recorded it, else its one-thread wall-clock (``train_seconds``; a reference model's card CPU time) --
    and the kept checkpoint's validation regret."""
    return {
        "model": name,
        "key": record["key"],
        "steps": int(record["steps"]),
        "seconds": float(record.get("cpu_seconds") or record["train_seconds"]),
        "best_val_regret": float(record["best_val_regret"]),
    }


def check_declared(exp: Experiment) -> None:
    """``settings.claims.alg_star_beaten`` names models of the experiment's panels; ``settings.selection``
    is ``{runs: N, seed: S}`` with ``S`` a validation seed. One line naming what is wrong."""
    from omgpt import seeding

    where = f"experiment {exp.name}: settings"
    claims, selection = exp.settings.get("claims"), exp.settings.get("selection")
    if (
        not isinstance(claims, dict)
        or set(claims) != {"alg_star_beaten"}
        or not isinstance(claims["alg_star_beaten"], list)
    ):
        raise OMGPTError(f"{where}.claims must be {{alg_star_beaten: [MODEL, ...]}}, got {claims!r}")
    panel_models = [p.model for p in exp.panels]
    for model in claims["alg_star_beaten"]:
        if model not in panel_models:
            raise OMGPTError(
                f"{where}.claims.alg_star_beaten: {model!r} is no panel's model ({', '.join(panel_models)})"
            )
    if not isinstance(selection, dict) or set(selection) != {"runs", "seed"}:
        raise OMGPTError(f"{where}.selection must be {{runs: N, seed: S}}, got {selection!r}")
    if not isinstance(selection["runs"], int) or isinstance(selection["runs"], bool) or selection["runs"] < 2:
        raise OMGPTError(f"{where}.selection.runs must be an integer of at least 2, got {selection['runs']!r}")
    seeding.check_validation_seed(selection["seed"], f"{where}.selection.seed")


def select_on_validation(
    panel: Panel, models: dict[str, ModelRecord], finetuned: str, device: str = "cpu", *, runs: int, seed: int
) -> dict:
    """Whether the fine-tuned model is kept: it and the supervised model play the same ``runs``
    environments of validation seed ``seed`` (common random numbers), and the one of lower mean final
    regret is kept. Returns both means, their paired difference and the kept model's label."""
    from omgpt.commands.experiment.panels import policy_specs
    from omgpt.evaluation import evaluate_policies

    task = panel.episode_task().validation_task()
    runs = min(runs, getattr(task, "windows", None) or runs)  # a data set's validation windows, each once
    specs = policy_specs(dataclasses.replace(panel, policies=[SUPERVISED, f"omgpt@{finetuned}"]), task, models, device)
    finals = {
        label: evaluate_policies(task, {policy: options}, runs, panel.horizon, seed, device=device, progress=False)[
            policy
        ]
        .cumulative_regret()[:, -1]
        .double()
        .numpy()
        for label, (policy, options) in specs.items()
    }
    sup, ft = float(finals[SUPERVISED].mean()), float(finals[finetuned].mean())
    return {
        "runs": runs,
        "seed": seed,
        "supervised": sup,
        "finetuned": ft,
        "finetuned_minus_supervised": paired_difference(finals[finetuned], finals[SUPERVISED]),
        "kept": finetuned if ft < sup else SUPERVISED,
    }


def below_best(panel: BeyondAlgStarPanel) -> bool:
    """The verdict: the paired 90% interval of the kept model / best benchmark lies below 1."""
    ci = panel["finetuning"]["kept_versus_best"]["ci90"]
    return ci is not None and ci[1] is not None and ci[1] < 1


def worse(panel: BeyondAlgStarPanel) -> bool:
    """Fine-tuning, as kept, made OMGPT worse: the paired 90% interval of kept − supervised lies above 0."""
    return _above_zero(panel["finetuning"]["kept_minus_supervised"])


def _moved(minus_supervised: dict) -> str:
    """Where fine-tuning took the model, against the gap to the best benchmark."""
    if _above_zero(minus_supervised):
        return "moved away from it"
    return "came closer, not enough" if _below_zero(minus_supervised) else "did not move measurably"


def _above_zero(d: dict) -> bool:
    return d["ci90"] is not None and d["ci90"][0] > 0


def _below_zero(d: dict) -> bool:
    return d["ci90"] is not None and d["ci90"][1] < 0


def kept_line(panel: BeyondAlgStarPanel) -> str:
    """Which model the validation selection kept, and on what."""
    sel = panel["finetuning"]["selection"]
    which = "the fine-tuned model" if sel["kept"] != SUPERVISED else "the supervised model (fine-tuning not kept)"
    return (
        f"kept {which}: on {sel['runs']:,} validation environments (seed {sel['seed']:,}) fine-tuned − supervised "
        f"{_difference(sel['finetuned_minus_supervised'])}"
    )


def verdict_line(panel: BeyondAlgStarPanel) -> str:
    """The panel's verdict for the kept model against its best benchmark (chosen on validation), with the paired ratio."""
    f, finals, (best, bench) = panel["finetuning"], final_regrets(panel), best_benchmark(panel)
    kept = f["selection"]["kept"]
    word, why = ("below", "lies below 1") if below_best(panel) else ("NOT below", "does not lie below 1")
    return (
        f"the kept OMGPT ({kept}) {finals[kept]:.2f} is {word} the best benchmark ({bench:.2f}, {best}): {kept} / {best} "
        f"{_ratio(f['kept_versus_best'])}, the interval {why}"
    )


def _ratio(r: dict | None) -> str:
    if r is None or r["mean"] is None:
        return "undefined (the reference's mean regret is not positive)"
    return f"{r['mean']:.2f} {interval(r['ci90'])}"


def _difference(d: dict) -> str:
    ci = d["ci90"]
    return f"{d['mean']:+.2f}" + (" [undefined]" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")


def _change(d: dict) -> str:
    if _below_zero(d):
        return "better than the supervised model"
    return "worse than the supervised model" if _above_zero(d) else "no difference at 90%"
