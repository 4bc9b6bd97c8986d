"""``report.md`` of ``omgpt experiment``: the paper's claim, the command, per-panel tables and verdicts,
the figures, and the models trained."""
from __future__ import annotations

import json
from pathlib import Path

from omgpt.commands.experiment.claims import check_claim
from omgpt.commands.experiment.panels import verdict


def headline(panel: dict) -> str:
    """One line per panel: the verdict, or the kind-specific number."""
    if "demand_prediction" in panel:
        m = panel["demand_prediction"]["methods"]
        n = len(m["omgpt"]["mse"])
        mid = min(9, n - 1)
        return (f"MSE after {mid + 1} samples: omgpt {m['omgpt']['mse'][mid]:.3g} vs ridge {m['ridge']['mse'][mid]:.3g}; "
                f"after {n}: omgpt {m['omgpt']['mse'][-1]:.3g} vs ridge {m['ridge']['mse'][-1]:.3g}")
    line = verdict(panel) or ""
    if "optimal_reward" in panel["policies"].get("omgpt", {}):
        from omgpt.analysis.experiment_figures import improvement_rate

        line += f"; reward improvement over the best benchmark {100 * improvement_rate(panel):+.1f}%"
    if "alg_star_match" in panel:
        line += f"; mean |TF - Alg*| {panel['alg_star_match']['mean_abs_diff']:.3f}"
    return line.lstrip("; ")


def flip_lines(panel: dict) -> list[str]:
    """Where OMGPT is not below the best benchmark: what the panel's numbers say about why (the
    Bayes-optimal ``alg-star`` OMGPT imitates, where it was played) and the config's note on what would
    close it."""
    from omgpt.analysis.report import best_benchmark, final_regrets, interval

    if "policies" not in panel or panel.get("models_compared") != ["omgpt"]:
        return []
    finals, (best, bench) = final_regrets(panel), best_benchmark(panel)
    if finals["omgpt"] < bench:
        return []
    lines = [f"Why OMGPT is not below {best} here:"]
    star = finals.get("alg-star")
    if star is not None and star <= 0:
        lines.append(f"alg-star's own mean regret here is {star:.2f}: on these environments the noise is larger than the gaps between the policies.")
    elif star is not None:
        q = panel["policies"]["omgpt"].get("ratio_to_alg_star") or {}
        b = panel["policies"][best].get("ratio_to_alg_star") or {}
        ours = f"{q['mean']:.2f}× alg-star {interval(q['ci90'])}" if q.get("mean") else f"{finals['omgpt'] / star:.2f}× alg-star"
        theirs = f"{b['mean']:.2f}× {interval(b['ci90'])}" if b.get("mean") else f"{bench / star:.2f}×"
        lines.append(f"OMGPT is at {ours}, {best} at {theirs}." + (
            f" {best} beats alg-star itself, the posterior policy OMGPT is pre-trained to imitate (posterior sampling /"
            " median / mean is Bayes-optimal for the loss of one step, not for regret over the horizon): imitating it better"
            " cannot close this gap; a target that explores as well as the tuned benchmark would." if bench < star else ""))
    if panel.get("note"):
        lines.append(panel["note"])
    return [" ".join(lines), ""]


def summary_lines(result: dict) -> str:
    lines = [f"  {p['title']}: {headline(p)}" for p in result["panels"]]
    lines += [f"  claim {'holds' if holds else 'does NOT hold'}: {words}" for words, holds, _ in check_claim(result)]
    return "\n".join(lines)


def learning_curve_lines(result: dict) -> list[str]:
    """Demand prediction: each model's observation-head error against training steps, and where the
    head misses ridge on a panel, the steps at which the curve's trend would reach ridge's error."""
    from omgpt.analysis.report import final_demand_errors, steps_to_reach

    curves = {name: rec["val_obs_mse"] for name, rec in result["models"].items() if rec.get("val_obs_mse")}
    if result.get("figure") != "demand-prediction" or not curves:
        return []
    lines = ["## The observation head's learning curve", "",
             "Its error after `T - 1` samples on the validation rollouts (`val/obs_mse`, logged at every validation), "
             "against training steps, beside ridge's after `T - 1` samples on the test panels it serves (`obs_learning_curve.png`).", ""]
    for name, curve in curves.items():
        rec = result["models"][name]
        served = [p for p in result["panels"] if p["model"] == name]
        ours, ridge = {}, {}
        for p in served:
            ours[p["title"]], ridge[p["title"]] = final_demand_errors(p)
        line = (f"* `{name}`: {curve[0][1]:.3g} after {curve[0][0]:,} steps, {curve[-1][1]:.3g} after {curve[-1][0]:,}; on the test panels "
                + ", ".join(f"{t} {ours[t]:.3g} against ridge's {ridge[t]:.3g}" for t in ridge) + ".")
        missed = [t for t in ridge if ours[t] >= ridge[t]]
        if missed:
            target = min(ridge[t] for t in missed)
            steps, slope = steps_to_reach(curve, target)
            if steps is None:
                line += f" Over the last half of training the curve does not fall (slope {slope:+.2f} in log-log): more steps of this recipe do not close the gap."
            else:
                per_step = rec.get("cpu_seconds", rec.get("train_seconds", 0)) / max(1, curve[-1][0])
                line += (f" Over the last half of training it falls as steps^{slope:.2f}; at that rate it reaches {target:.3g} "
                         f"after ~{steps:,.0f} steps, {steps / curve[-1][0]:.0f}x the {curve[-1][0]:,} trained"
                         + (f" (~{_cpu_time(steps * per_step)} at this model's speed)." if per_step else "."))
        lines.append(line)
    return lines + [""]


def _cpu_time(seconds: float) -> str:
    return f"{seconds / 60:.0f} CPU-minutes" if seconds < 7200 else f"{seconds / 3600:.0f} CPU-hours"


def report(result: dict) -> str:
    """``report.md``: claim, command, per-panel tables and verdicts, figures, the models trained."""
    from omgpt.analysis.report import interval

    lines = [f"# {result['title']}", ""]
    if result["source"]:
        lines += [f"Paper: {result['source']}", ""]
    if result["claim"]:
        lines += [f"Paper's claim: {result['claim']}", ""]
    lines += [f"Reproduce: `{result['command']}` (scale `{result['scale']}`, {result['runs']} test runs per panel, "
              f"seed {result['seed']}; this run took {result['seconds']:.0f} s, training included for models not "
              f"trained before; each model's training time is in the table at the end).", ""]
    lines += [f"![{Path(f).stem}]({f})" for f in result["figures"]] + [""]
    checks = check_claim(result)
    if checks:
        lines += ["## The paper's claim, checked", ""]
        lines += [f"* **{'holds' if holds else 'does not hold'}**: {words}. {numbers}." for words, holds, numbers in checks] + [""]
    lines += learning_curve_lines(result)
    for panel in result["panels"]:
        lines += [f"## {panel['title']}", "", f"{panel['task']} {json.dumps(panel.get('task_options') or {})}, horizon {panel.get('horizon', '')}"
                  + (f", context window {panel['window']}" if panel.get("window") else "") + f", model `{panel['model']}`.", ""]
        if "policies" in panel:
            ratio = any("ratio_to_alg_star" in p for p in panel["policies"].values())
            lines += ["| policy | mean final regret | 90% CI of mean | 90% band | final suboptimality |" + (" / alg-star [paired 90% CI] |" if ratio else ""),
                      "|---|---|---|---|---|" + ("---|" if ratio else "")]
            for label, p in sorted(panel["policies"].items(), key=lambda kv: kv[1]["final_regret"]["mean"]):
                r = p["final_regret"]
                line = f"| {label} | {r['mean']:.2f} | {interval(r['ci90'])} | {interval(r['band90'])} | {p['final_suboptimality']['mean']:.3f} |"
                if ratio:
                    q = p.get("ratio_to_alg_star")
                    line += " |" if q is None else f" {'undefined' if q['mean'] is None else format(q['mean'], '.2f')} {interval(q['ci90'])} |"
                lines.append(line)
            lines.append("")
            if panel.get("tuned_constants"):
                lines += ["Tuned constants (chosen on validation environments of `" + panel["tuned_on"] + "`, `configs/tuned/`): "
                          + "; ".join(f"{k} {json.dumps(v)}" for k, v in panel["tuned_constants"].items()), ""]
        if headline(panel):
            lines += [f"**{headline(panel)}**", ""]
        lines += flip_lines(panel)
    lines += ["## Models", "", "| model | steps | train s | best val regret | model folder |", "|---|---|---|---|---|"]
    for name, rec in result["models"].items():
        lines.append(f"| {name} | {rec.get('steps', '')} | {rec.get('train_seconds', '')} | {rec.get('best_val_regret', '')} | `{rec['key']}` |")
    lines += ["", "Training commands (the model folders are content-addressed: the same command reuses the model):", ""]
    lines += [f"* {name}: `{rec['command']}`" for name, rec in result["models"].items()]
    return "\n".join(lines) + "\n"
