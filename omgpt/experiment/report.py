"""``report.md`` of ``omgpt experiment``: the paper's claim, the command, per-panel tables and verdicts,
the figures, and the models trained."""
from __future__ import annotations

import json
from pathlib import Path

from omgpt.experiment.claims import check_claim
from omgpt.experiment.panels import verdict


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
        from analysis.experiment_figures import improvement_rate

        line += f"; reward improvement over the best benchmark {100 * improvement_rate(panel):+.1f}%"
    if "alg_star_match" in panel:
        line += f"; mean |TF - Alg*| {panel['alg_star_match']['mean_abs_diff']:.3f}"
    return line.lstrip("; ")


def summary_lines(result: dict) -> str:
    lines = [f"  {p['title']}: {headline(p)}" for p in result["panels"]]
    lines += [f"  claim {'holds' if holds else 'does NOT hold'}: {words}" for words, holds, _ in check_claim(result)]
    return "\n".join(lines)


def report(result: dict) -> str:
    """``report.md``: claim, command, per-panel tables and verdicts, figures, the models trained."""
    from analysis.report import interval

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
    for panel in result["panels"]:
        lines += [f"## {panel['title']}", "", f"{panel['task']} {json.dumps(panel.get('task_options') or {})}, horizon {panel.get('horizon', '')}"
                  + (f", context window {panel['window']}" if panel.get("window") else "") + f", model `{panel['model']}`.", ""]
        if "policies" in panel:
            lines += ["| policy | mean final regret | 90% CI of mean | 90% band | final suboptimality |", "|---|---|---|---|---|"]
            for label, p in sorted(panel["policies"].items(), key=lambda kv: kv[1]["final_regret"]["mean"]):
                r = p["final_regret"]
                lines.append(f"| {label} | {r['mean']:.2f} | {interval(r['ci90'])} | {interval(r['band90'])} | {p['final_suboptimality']['mean']:.3f} |")
            lines.append("")
        if headline(panel):
            lines += [f"**{headline(panel)}**", ""]
    lines += ["## Models", "", "| model | steps | train s | best val regret | model folder |", "|---|---|---|---|---|"]
    for name, rec in result["models"].items():
        lines.append(f"| {name} | {rec.get('steps', '')} | {rec.get('train_seconds', '')} | {rec.get('best_val_regret', '')} | `{rec['key']}` |")
    lines += ["", "Training commands (the model folders are content-addressed: the same command reuses the model):", ""]
    lines += [f"* {name}: `{rec['command']}`" for name, rec in result["models"].items()]
    return "\n".join(lines) + "\n"
