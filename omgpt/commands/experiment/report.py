"""``report.md`` of ``omgpt experiment``: the paper's claim, the command, per-panel tables and verdicts,
the figures, and the models trained -- the skeleton every experiment kind shares, with the kind's
claim checks, sections and panel headlines filled in."""

from __future__ import annotations

import json
from pathlib import Path

from omgpt.commands.experiment.registry import kind_of
from omgpt.commands.experiment.results import ExperimentResult, RegretPanel


def flip_lines(panel: RegretPanel) -> list[str]:
    """Where OMGPT is not *below* the best benchmark (its verdict *level* or *behind*): what the panel's
    numbers say about why -- the Bayes-optimal ``alg-star`` OMGPT imitates, where it was played -- or,
    where nothing was measured, that plainly (the config's note, shown after it, may say more)."""
    from omgpt.analysis.report import best_benchmark, final_regrets, interval
    from omgpt.commands.experiment.panels import RELATION, panel_state

    state = panel_state(panel)
    if "policies" not in panel or panel.get("models_compared") != ["omgpt"] or state in (None, "below"):
        return []
    finals, (best, bench) = final_regrets(panel), best_benchmark(panel)
    reasons = []
    star = finals.get("alg-star")
    if star is not None and star <= 0:
        reasons.append(
            f"alg-star's own mean regret here is {star:.2f}: on these environments the noise is larger than the gaps between the policies."
        )
    elif star is not None:
        q = panel["policies"]["omgpt"].get("ratio_to_alg_star") or {}
        b = panel["policies"][best].get("ratio_to_alg_star") or {}
        ours = (
            f"{q['mean']:.2f}× alg-star {interval(q['ci90'])}"
            if q.get("mean")
            else f"{finals['omgpt'] / star:.2f}× alg-star"
        )
        theirs = f"{b['mean']:.2f}× {interval(b['ci90'])}" if b.get("mean") else f"{bench / star:.2f}×"
        reasons.append(
            f"OMGPT is at {ours}, {best} at {theirs}."
            + (
                f" {best} beats alg-star itself, the posterior policy OMGPT is pre-trained to imitate (posterior sampling /"
                " median / mean is Bayes-optimal for the loss of one step, not for regret over the horizon): imitating it better"
                " cannot close this gap; a target that explores as well as the tuned benchmark would."
                if bench < star
                else ""
            )
        )
    if not reasons:
        reasons.append(
            "the panel does not play alg-star, so it measured no reason; "
            + (
                "the note below says what was measured elsewhere."
                if panel.get("note")
                else "none was measured elsewhere."
            )
        )
    return [f"Why OMGPT is {RELATION[state]} {best} here: " + " ".join(reasons), ""]


def state_counts(panels: list) -> dict[str, int]:
    """How many regret panels are *below*, *level* with and *behind* their best benchmark (the first
    model each panel compares)."""
    from omgpt.commands.experiment.panels import STATES, panel_state

    found = [panel_state(p, (p.get("models_compared") or ["omgpt"])[0]) for p in panels]
    return {s: found.count(s) for s in STATES}


def sizing_lines(panel: RegretPanel) -> list[str]:
    """How many test runs the panel played, and why."""
    from omgpt.commands.experiment.panels import sizing_words

    return [sizing_words(panel["sizing"]), ""] if panel.get("sizing") else []


def note_lines(panel: RegretPanel) -> list[str]:
    """The config's note on a panel, under it whatever the panel's verdict: what was measured about it
    (why OMGPT is not below the best benchmark and what would close it; how a retrained model's recipe
    was chosen and what its curve says a missed goal would take)."""
    return [panel["note"], ""] if panel.get("note") else []


def best_lines(panel: RegretPanel) -> list[str]:
    """The panel's best benchmark, how it was chosen, and both variants' numbers (validation and test)."""
    from omgpt.analysis.report import best_benchmark, best_rule

    if not panel.get("benchmarks"):
        return []
    best, _ = best_benchmark(panel)
    base = best.removesuffix("-tuned")
    val = (panel.get("best_benchmark") or {}).get("validation_regret", {})
    finals = {k: p["final_regret"]["mean"] for k, p in panel["policies"].items()}
    shown = "; ".join(
        f"`{v}`"
        + (f" validation {val[v]['mean']:.2f} ± {val[v]['se']:.2f}," if v in val else "")
        + f" test {finals[v]:.2f}"
        for v in (base, f"{base}-tuned")
        if v in finals
    )
    return [f"Best benchmark: **{best}**, chosen by {best_rule(panel)}. Its variants: {shown}.", ""]


def summary_lines(result: ExperimentResult) -> str:
    """The console summary: each panel's headline, then the claim checks."""
    kind = kind_of(result)
    lines = [f"  {p['title']}: {kind.headline(p)}" for p in result["panels"]]
    lines += [f"  claim {'holds' if holds else 'does NOT hold'}: {words}" for words, holds, _ in kind.claims(result)]
    return "\n".join(lines)


def report(result: ExperimentResult) -> str:
    """``report.md``: claim, command, per-panel tables and verdicts, figures, the models trained."""
    from omgpt.analysis.report import interval

    kind = kind_of(result)
    lines = [f"# {result['title']}", ""]
    if result["source"]:
        lines += [f"Paper: {result['source']}", ""]
    if result["claim"]:
        lines += [f"Paper's claim: {result['claim']}", ""]
    lines += [
        f"Reproduce: `{result['command']}` (scale `{result['scale']}`, "
        + (
            f"test runs sized per panel, at least {result['runs']}"
            if any(p.get("sizing") for p in result["panels"])
            else f"{result['runs']} test runs per panel"
        )
        + f", seed {result['seed']}; this run took {result['seconds']:.0f} s, training included for models not "
        f"trained before; each model's training time is in the table at the end).",
        "",
    ]
    lines += [f"![{Path(f).stem}]({f})" for f in result["figures"]] + [""]
    counts = state_counts(result["panels"])
    if sum(counts.values()):
        lines += [
            "Verdicts against the best benchmark (paired 90% intervals over each panel's test environments): "
            + ", ".join(f"{n} {state}" for state, n in counts.items())
            + ".",
            "",
        ]
    checks = kind.claims(result)
    if checks:
        lines += ["## The paper's claim, checked", ""]
        lines += [
            f"* **{'holds' if holds else 'does not hold'}**: {words}. {numbers}." for words, holds, numbers in checks
        ] + [""]
    lines += kind.sections(result)
    for panel in result["panels"]:
        lines += [
            f"## {panel['title']}",
            "",
            f"{panel['task']} {json.dumps(panel.get('task_options') or {})}, horizon {panel.get('horizon', '')}"
            + (f", context window {panel['window']}" if panel.get("window") else "")
            + f", model `{panel['model']}`.",
            "",
        ]
        if "policies" in panel:
            ratio = any("ratio_to_alg_star" in p for p in panel["policies"].values())
            lines += [
                "| policy | mean final regret | 90% CI of mean | 90% band | final suboptimality |"
                + (" / alg-star [paired 90% CI] |" if ratio else ""),
                "|---|---|---|---|---|" + ("---|" if ratio else ""),
            ]
            for label, p in sorted(panel["policies"].items(), key=lambda kv: kv[1]["final_regret"]["mean"]):
                r = p["final_regret"]
                line = f"| {label} | {r['mean']:.2f} | {interval(r['ci90'])} | {interval(r['band90'])} | {p['final_suboptimality']['mean']:.3f} |"
                if ratio:
                    q = p.get("ratio_to_alg_star")
                    line += (
                        " |"
                        if q is None
                        else f" {'undefined' if q['mean'] is None else format(q['mean'], '.2f')} {interval(q['ci90'])} |"
                    )
                lines.append(line)
            lines.append("")
            lines += best_lines(panel)
            if panel.get("tuned_constants"):
                lines += [
                    "Tuned constants (chosen on validation environments of `"
                    + panel["tuned_on"]
                    + "`, `configs/tuned/`): "
                    + "; ".join(f"{k} {json.dumps(v)}" for k, v in panel["tuned_constants"].items()),
                    "",
                ]
        if kind.headline(panel):
            lines += [f"**{kind.headline(panel)}**", ""]
        lines += sizing_lines(panel) + flip_lines(panel) + note_lines(panel)
    lines += ["## Models", "", "| model | steps | train s | best val regret | model folder |", "|---|---|---|---|---|"]
    for name, rec in result["models"].items():
        lines.append(
            f"| {name} | {rec.get('steps', '')} | {rec.get('train_seconds', '')} | {rec.get('best_val_regret', '')} | `{rec['key']}` |"
        )
    lines += ["", "Training commands (the model folders are content-addressed: the same command reuses the model):", ""]
    lines += [f"* {name}: `{rec['command']}`" for name, rec in result["models"].items()]
    return "\n".join(lines) + "\n"
