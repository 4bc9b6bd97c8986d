"""The result tables of the README and of ``docs/``, generated from the JSON in ``results/`` so that they
cannot drift.

    python -m tools.readme_tables            # rewrite every generated block of README.md and docs/*.md
    python -m tools.readme_tables --check    # exit 1 if a block differs from what the JSON says

A generated block sits between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` in whichever page
holds it (README.md or a docs/ page); ``TABLES[NAME]`` builds its Markdown from the results, with links
relative to the repository root, which ``render`` rewrites relative to the page. ``tests/test_readme.py``
runs the check.

A number in prose is generated the same way, inline: ``<!-- n:FILE:PATH|FORMAT -->1.07×<!-- /n -->``
holds the value at ``PATH`` of the JSON file ``FILE`` (relative to the repository), written as ``FORMAT``
says (:data:`FORMATS`). ``PATH`` is ``/``-separated keys and list indices; ``KEY=VALUE`` picks the item of
a list whose ``KEY`` is ``VALUE`` (``panels/title=Queueing control/vs_best/omgpt``). A value that no
longer exists is an error naming the page and the marker, so a number cannot outlive its source.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

from omgpt.analysis.report import best_benchmark, final_demand_errors, final_regrets, interval
from omgpt.entry import entry_point, script_parser
from omgpt.commands.experiment.panels import STATES, state
from omgpt.commands.store import read_card
from omgpt.errors import OMGPTError
from omgpt.files import write_text
from omgpt.records import NUMBER, Optional, read_json
from tools.keep_previous import model_identity, previous_path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def pages() -> list[Path]:
    """Every page that may hold generated blocks: the README, the docs and the benchmarks' results."""
    return [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "RESULTS.md"]


def recipe_table() -> str:
    """The recipe study (``results/recipe/recipe.json``): per task, sorted by final validation regret."""
    data = json.loads((ROOT / "results" / "recipe" / "recipe.json").read_text())
    lines = [
        "| task | variant (lever) | steps | CPU-minutes | val. regret at `T = 50` (× alg-star) | `\\|a − a*\\|` at `t = 50` |",
        "|---|---|---|---|---|---|",
    ]
    for task, star in data["alg-star"].items():
        variants = sorted(
            ((n, r) for n, r in data["variants"].items() if r["task"] == task), key=lambda kv: kv[1]["final"]["regret"]
        )
        for name, r in variants:
            f = r["final"]
            lever = re.sub(
                r"^Lever (\w) \((.*?)\).*$", r"\1: \2", r["lever"].split(":", 1)[0]
            )  # "Lever d (batch)" -> "d: batch"
            lines.append(
                f"| {task} | `{name}` ({lever}) | {f['step']:,} | {f['minutes']:.1f} | {f['regret']:.2f} ({f['regret'] / star['regret']:.2f}×) | {f['subopt']:.3f} |"
            )
        lines.append(
            f"| {task} | `alg-star` (Bayes-optimal, no training) | | | {star['regret']:.2f} (1.00×) | {star['subopt']:.3f} |"
        )
    return "\n".join(lines)


def pretrained_table() -> str:
    """The shipped reference models (``pretrained/*/card.json``: configured ones, and the fine-tuned ``*-rl``
    ones adopted from the run store, whose CPU-minutes are pre-training + fine-tuning) and the configured
    ones not shipped yet. A retrained model's ratio has the one of the model it replaced beside it."""
    lines = [
        "| model | task, `T` | kept step / trained steps | CPU-minutes | test environments (seed) | OMGPT | alg-star | OMGPT / alg-star, paired 90% CI (replication seed) | best benchmark | `\\|a − a*\\|` at `T`: OMGPT / best benchmark |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    configured = {p.stem for p in (ROOT / "configs" / "pretrained").glob("*.yaml")}
    for name in sorted(configured | {p.parent.name for p in (ROOT / "pretrained").glob("*/card.json")}):
        card_path = ROOT / "pretrained" / name / "card.json"
        if not card_path.is_file():
            lines.append(f"| `{name}` | not trained yet (`configs/pretrained/{name}.yaml`) | | | | | | | | |")
            continue
        card = read_card(card_path.parent)  # checked: schema, kept step, the shipped model's checksum
        pols = card["test"]["policies"]
        final = {k: v["final_regret"]["mean"] for k, v in pols.items()}
        bench = min((k for k in pols if k not in ("omgpt", "alg-star", "oracle")), key=final.get)
        star = final.get("alg-star")
        q, rep = card.get("ratio_to_alg_star"), card.get("replication")
        ratio = "—" if not q or q["mean"] is None else f"{q['mean']:.2f}× {interval(q['ci90'])}"
        if q and rep and rep.get("mean") is not None:
            ratio += f" ({rep['mean']:.2f}× {interval(rep['ci90'])}, seed {rep['seed']})"
        old = (card.get("previous") or {}).get("ratio_to_alg_star")
        if old and old["mean"] is not None:  # a retrained model: the one it replaced, as the experiments table does
            ratio += (
                f"; replaced model: {old['mean']:.2f}× {interval(old['ci90'])} ({card['previous']['steps']:,} steps)"
            )
        sub = lambda k: pols[k]["final_suboptimality"]["mean"]  # noqa: E731
        source = card.get("adopted_from") or {}
        cost = (
            f"{source['parent_cpu_minutes']:.0f} + {card['cpu_minutes']:.0f}"
            if "parent_cpu_minutes" in source
            else f"{card['cpu_minutes']:.0f}"
        )
        lines.append(
            f"| [`{card['name']}`](pretrained/{card['name']}/card.md) | {card['task']}, {card['horizon']} | {card['steps']:,} / {card['validation'][-1]['step']:,} | "
            f"{cost} | {card['test']['runs']:,} ({card['test']['seed']}) | {final['omgpt']:.2f} | {f'{star:.2f}' if star else '—'} | {ratio} | "
            f"{bench} {final[bench]:.2f} | {sub('omgpt'):.3f} / {sub(bench):.3f} |"
        )
    return "\n".join(lines)


def tuning_table() -> str:
    """The benchmarks' tuned constants (``configs/tuned/*.json``): per setting and benchmark, the
    validation regret at the paper's constants and at the tuned ones, and whether a tuned constant
    sits on an end of its (widened) grid: **bounded** where the widening's bound stopped the search
    (the optimum may lie further out), "end of range" where nothing lies further out."""
    lines = [
        "| setting | benchmark | tuned constants | validation regret: paper's constants → tuned (± s.e.) | on a grid's end | validation environments (seed) |",
        "|---|---|---|---|---|---|",
    ]
    for path in sorted((ROOT / "configs" / "tuned").glob("*.json")):
        data = json.loads(path.read_text())
        for name, e in data["policies"].items():
            best = e.get("final_regret") or min(e["curve"], key=lambda p: p["final_regret"]["mean"])["final_regret"]
            constants = ", ".join(f"{k} {v:g}" for k, v in e["constants"].items())
            lines.append(
                f"| `{path.stem}` | {name} | {constants} | {e['paper']['final_regret']['mean']:.2f} → {best['mean']:.2f} ± {best['se']:.2f} | "
                f"{edge_cell(e)} | {e['validation']['runs']} ({e['validation']['seed']}) |"
            )
    return "\n".join(lines)


def edge_cell(entry: dict) -> str:
    """Where a tuned entry's constants sit on an end of the values searched (``omgpt.tuning``)."""
    if "bounded" not in entry:
        return "not checked (tuned before grids were widened: re-tune)"
    cells = [
        f"**bounded**: {k} at the {side} end after {entry['widen_steps']} widening steps"
        for k, side in entry["bounded"].items()
    ]
    cells += [f"{k} at the {side} end of its range" for k, side in entry["at_limit"].items()]
    return "; ".join(cells) or "—"


def panel_cell(panel: dict) -> tuple[str, str | None]:
    """One panel's numbers in a few words, and its three-state verdict against the panel's reference
    (``below`` / ``level`` / ``behind``, from a paired 90% interval: OMGPT against the best benchmark;
    on real demand its cost per unit demanded against the benchmark lowest on test, by the cluster
    interval; the observation head's error against ridge's); None where the panel has none."""
    from omgpt.commands.experiment.kinds.demand_prediction import demand_state
    from omgpt.commands.experiment.panels import panel_state

    title = panel["title"]
    if "demand_prediction" in panel:
        m = panel["demand_prediction"]["methods"]
        ours, ridge = final_demand_errors(panel)
        verdict = demand_state(panel)
        return (
            f"{title}: MSE after {len(m['omgpt']['mse'])} samples {_bold(ours, verdict == 'below')} vs ridge {ridge:.3g} ({verdict})",
            verdict,
        )
    if "costs" in panel:  # real demand: its headline metric (per unit demanded), against the benchmark lowest on it
        from omgpt.commands.experiment.kinds.real_demand import (
            pooled_versus_best,
            real_demand_state,
            versus_best_benchmark,
        )

        best, cost, _ = versus_best_benchmark(panel)
        verdict = real_demand_state(panel)
        ours = panel["costs"]["omgpt"]["scaled_cost"]["mean"]
        short = re.sub(r"Held-out stores \((split \d+)\)", r"stores \1", title)  # 24 panels must fit the README
        short = re.sub(r"Later dates(?: \((origin \d+)\))?", lambda m: "dates " + (m.group(1) or ""), short)
        shown = f"**{ours:.4f}**" if verdict == "below" else f"{ours:.4f}"
        cell = f"{short.replace('q = ', 'q ').replace(' ,', ',')}: {shown} vs {best} {cost:.4f}"
        if "pooled" in panel:  # the last rolling origin: every origin's windows pooled
            best, cost, ours, ratio = pooled_versus_best(panel)
            lo, hi = ratio["ci90"]
            cell += f" (origins pooled: {ours:.4f} vs {best} {cost:.4f}, {ratio['mean']:.2f}× [{lo:.2f}, {hi:.2f}])"
        return cell, verdict
    finals, (best, _) = final_regrets(panel), best_benchmark(panel)
    ours = panel["models_compared"]
    star = f", alg-star {finals['alg-star']:.3g}" if "alg-star" in finals else ""
    match = (
        f", mean \\|TF − Alg*\\| {panel['alg_star_match']['mean_abs_diff']:.3g}" if "alg_star_match" in panel else ""
    )
    # the model a panel stands for: the first compared (the paper's OMGPT), or the one beyond-alg-star's
    # validation selection kept (the fine-tuned model where it won there, else the supervised one)
    kept = panel.get("finetuning", {}).get("selection", {}).get("kept", ours[0])
    verdict = panel_state(panel, kept)
    runs = (panel.get("vs_best") or {}).get(kept, {}).get("runs")
    models = (
        ", ".join(f"{k} {_bold(finals[k], panel_state(panel, k) == 'below')}" for k in sorted(ours, key=finals.get))
        if ours != ["omgpt"]
        else _bold(finals["omgpt"], verdict == "below")
    )
    shown = f" ({verdict}, {runs:,} runs)" if verdict else " (no paired interval)"
    return f"{title}: {models} vs {best} {finals[best]:.4g}{star}{match}{shown}", verdict


def real_demand_cells(panels: list[dict]) -> list[tuple[str, None]]:
    """Real demand's panels by setting (held-out stores, or later dates, at one q): in how many split
    seeds (origins) OMGPT is below, level with and behind the benchmark lowest on test (by the cluster
    interval), the range of OMGPT / the best benchmark, and over the rolling origins their pooled ratio
    [cluster 90%] (24 panels in a few words each)."""
    from omgpt.commands.experiment.kinds.real_demand import (
        pooled_versus_best,
        real_demand_state,
        setting_groups,
        versus_best_benchmark,
    )

    cells = []
    for (split, q), group in setting_groups(panels).items():
        ratios = []
        for p in group:
            best, _, _ = versus_best_benchmark(p)
            ratios.append(p["costs"]["omgpt"]["ratio_to"][best]["mean"])
        unit = "origins" if "pooled" in group[-1] else "splits"
        name = split.replace("Held-out stores", "stores").replace("Later dates", "dates")
        counts = _state_words([real_demand_state(p) for p in group])
        cell = f"{name}, {q.replace('q = ', 'q ')}: {counts} of {len(group)} {unit}, × best {min(ratios):.2f}-{max(ratios):.2f}"
        if "pooled" in group[-1]:
            best, _, _, ratio = pooled_versus_best(group[-1])
            pooled = state(ratio["ci90"], "ratio")
            cell += f", pooled {_bold(ratio['mean'], pooled == 'below')}× {interval(ratio['ci90'])} {best} ({pooled})"
        cells.append((cell, None))
    return cells


def _state_words(states: list[str | None]) -> str:
    """``2 below / 1 level / 0 behind`` (panels without a verdict left out)."""
    return " / ".join(f"{states.count(s)} {s}" for s in STATES)


def _bold(value: float, win: bool) -> str:
    return f"**{value:.3g}**" if win else f"{value:.3g}"


def experiments_table() -> str:
    """Every experiment's result (``results/*/experiment.json``): per panel OMGPT against the best
    benchmark, and how many panels are below, level with and behind it (paired 90% intervals)."""
    lines = [
        "| experiment (paper) | scale, test `T` | the paper's claim | panels below / level / behind | measured (mean final regret over the test runs, real demand: cost per unit demanded; bold: below the best benchmark, its paired 90% interval wholly on OMGPT's side) | retrained panels: the previous recipe's number |",
        "|---|---|---|---|---|---|",
    ]
    for path in sorted((ROOT / "results").glob("*/experiment.json")):
        result = json.loads(path.read_text())
        cells = [panel_cell(p) for p in result["panels"]]
        counts = _state_words([v for _, v in cells])
        if all("costs" in p for p in result["panels"]):  # real demand: one cell per setting, not per panel
            cells = real_demand_cells(result["panels"])
        horizons = sorted({p["horizon"] for p in result["panels"] if p.get("horizon")})
        lines.append(
            f"| [`{result['name']}`](results/{result['name']}/report.md) ({result['source']}) | {result['scale']}, "
            f"{' / '.join(map(str, horizons))}, seed {result['seed']} | {result['claim']} | {counts} of {len(result['panels'])} | {'; '.join(c for c, _ in cells)} | "
            f"{previous_cell(result, previous_path(path.parent.name))} |"
        )
    return "\n".join(lines)


def finetune_table() -> str:
    """beyond-alg-star's run per setting (``results/beyond-alg-star/experiment.json``): the supervised and
    fine-tuned models' mean final regrets, alg-star's, the best benchmark's and the kept model's paired
    ratio to it with its verdict, fine-tuned − supervised on test and on the selection's validation
    environments, and which model the validation kept."""
    path = ROOT / "results" / "beyond-alg-star" / "experiment.json"
    result = json.loads(path.read_text())
    sel = result["panels"][0]["finetuning"]["selection"]
    lines = [
        f"Test seed {result['seed']}; validation: {sel['runs']:,} environments of seed {sel['seed']:,}.",
        "",
        "| setting | supervised | fine-tuned | `alg-star` | best benchmark | kept / best [paired 90% CI] | "
        "fine-tuned − supervised, test [paired 90% CI] | the same on validation | kept |",
        "|---|---:|---:|---:|---|---|---|---|---|",
    ]
    for panel in result["panels"]:
        f, finals = panel["finetuning"], final_regrets(panel)
        ours, child = f["supervised"]["label"], f["finetuned"]["label"]
        best, bench = best_benchmark(panel)
        kept = f["selection"]["kept"]
        verdict = state(f["kept_versus_best"]["ci90"], "ratio")
        lines.append(
            f"| {panel['title']} | {finals[ours]:.2f} | {finals[child]:.2f} | {finals.get('alg-star', float('nan')):.2f} | "
            f"{best} {bench:.2f} | {_with_interval(f['kept_versus_best'], '×')} ({verdict}) | "
            f"{_with_interval(f['minus_supervised'])} | {_with_interval(f['selection']['finetuned_minus_supervised'])} | "
            f"{'fine-tuned' if kept == child else 'supervised'} |"
        )
    return "\n".join(lines)


def summary_table() -> str:
    """The README's compact results: one row per experiment, its panels' three-state verdicts (the full
    table, every panel's numbers, is :func:`experiments_table`, on docs/results.md)."""
    lines = [
        "| experiment | the paper's figure | panels below / level / behind the best benchmark | test seed |",
        "|---|---|---|---|",
    ]
    for path in sorted((ROOT / "results").glob("*/experiment.json")):
        result = json.loads(path.read_text())
        counts = _state_words([panel_cell(p)[1] for p in result["panels"]])
        lines.append(
            f"| [`{result['name']}`](results/{result['name']}/report.md) | {result['source']} | "
            f"{counts} (of {len(result['panels'])}) | {result['seed']} |"
        )
    return "\n".join(lines)


def previous_cell(result: dict, path: Path) -> str:
    """The previous recipe's number (``results/previous-recipe/NAME.json``, ``tools/keep_previous.py``) of every
    panel whose model has been retrained since: its store key differs from the one the record names, or,
    for a reference model, its card's checksum does."""
    if not path.is_file():
        return ""
    previous = json.loads(path.read_text())
    shared = Counter(p["model"] for p in previous["panels"])  # a model with several panels: name each
    cells = []
    for p in previous["panels"]:
        key = result["models"].get(p["model"], {}).get("key")
        if key is not None and all(p.get(k) == v for k, v in model_identity(key).items()):
            continue
        name = p["model"] if shared[p["model"]] == 1 else f"{p['model']} ({p['title']})"
        if "ratio" in p:
            versus = f", {p['ratio']:.2f}× {interval(p['ratio_ci90'])} {p['reference']}"
        else:
            versus = f" vs {p['reference']} {p['reference_value']:.3g}" if "reference" in p else ""
        cells.append(f"{name}: {p['omgpt']:.3g}{versus}")
    return f"{previous['recipe']}: {'; '.join(cells)}" if cells else ""


def cost_table() -> str:
    """What reproducing every experiment costs on this machine, from the runs ``results/*/experiment.json``
    record: each distinct model's training (a model shared by several experiments, or a reference model
    standing in for several, counted once) and each experiment's evaluation. Only runs whose models are
    all in the repository (``results/models/KEY/done.json`` or a reference model) count: a run older
    than the committed store is at a scale the repository no longer reproduces."""
    lines = [
        "| experiment | scale, test `T` | models (reference models) | training, CPU-minutes (first use) | evaluation, minutes |",
        "|---|---|---|---|---|",
    ]
    counted: dict[str, float] = {}
    evaluation, stale = 0.0, []
    for path in sorted((ROOT / "results").glob("*/experiment.json")):
        result = json.loads(path.read_text())
        records = result["models"].values()
        horizons = sorted({p["horizon"] for p in result["panels"] if p.get("horizon")})
        row = f"| `{result['name']}` | {result['scale']}, {' / '.join(map(str, horizons))} | "
        if not all(
            r["key"].startswith("pretrained/") or (ROOT / "results" / "models" / r["key"] / "done.json").is_file()
            for r in records
        ):
            stale.append(result["name"])
            lines.append(
                row
                + f"{len(result['models'])} | not counted: an older scale's run, its models not in `results/models/` | |"
            )
            continue
        new = {r["key"]: _training_seconds(r) for r in records if r["key"] not in counted}
        counted.update(new)
        # runs before evaluation_seconds was recorded: their total, which is the evaluation where the
        # models were trained beforehand (--train-only), as in every run at the CPU recipe's scale
        seconds = result.get("evaluation_seconds", result["seconds"])
        evaluation += seconds
        shipped = sum(r["key"].startswith("pretrained/") for r in records)
        untimed = result.get("untimed_panels", 0)  # read from the panel store, their time not recorded
        spent = (
            f"{seconds / 60:.0f}"
            if not untimed
            else f"{seconds / 60:.0f} + {untimed} of {len(result['panels'])} panels untimed"
        )
        lines.append(row + f"{len(result['models'])} ({shipped}) | {sum(new.values()) / 60:.0f} | {spent} |")
    training = sum(counted.values())
    lines.append(
        f"| **all counted** | | {len(counted)} distinct | **{training / 60:.0f}** | **{evaluation / 60:.0f}** |"
    )
    lines.append("")
    lines.append(
        f"In all {(training + evaluation) / 3600:.1f} core-hours; with two models training at once "
        f"(`--jobs 2`, one core each) about {(training / 2 + evaluation) / 3600:.1f} hours of wall-clock on this 2-core machine"
        + (f", {len(stale)} experiment(s) not yet counted ({', '.join(stale)})." if stale else ".")
    )
    return "\n".join(lines)


def _training_seconds(record: dict) -> float:
    """A model's training time: its store record's (``done.json``, the latest word on a resumed fit),
    in CPU seconds where recorded -- a one-thread fit's time on an idle core, even when fits shared
    the cores -- else wall-clock seconds."""
    done = ROOT / "results" / "models" / record["key"] / "done.json"
    if done.is_file():
        record = read_json(done, {"train_seconds": NUMBER, "cpu_seconds": Optional(NUMBER)}, "store record")
    return record.get("cpu_seconds", record["train_seconds"])


def real_demand_table() -> str:
    """``omgpt experiment real-demand``'s headline table (``results/real-demand/experiment.json``): per
    split and q, the cost per unit demanded across split seeds and with its cluster interval."""
    from omgpt.commands.experiment.kinds.real_demand import summary_table

    path = ROOT / "results" / "real-demand" / "experiment.json"
    if not path.is_file():
        return "(not run yet: `omgpt experiment real-demand`)"
    return "\n".join(summary_table(json.loads(path.read_text())["panels"]))


def levers_table() -> str:
    """The hard priors' lever study (``benchmarks/levers/SETTING.json``, ``benchmarks/lever_study.py``):
    per setting and arm, the training CPU-minutes to each target ratio on the validation curve, the best
    ratio seen, and the kept checkpoint's ratio on the held-out validation environments [paired 90%]."""
    lines = [
        "| setting | arm | steps | CPU-ms / step | CPU-min to 2x / 1.5x / 1.25x (head: 4x / 2x / 1x) | best ratio (at CPU-min) | kept checkpoint, held-out ratio [90%] |",
        "|---|---|---|---|---|---|---|",
    ]
    found = sorted((ROOT / "benchmarks" / "levers").glob("*.json"))
    for path in found:
        record = json.loads(path.read_text())
        for arm in record["arms"]:
            reached = " / ".join(
                f"{hit['cpu_s'] / 60:.0f}" if (hit := arm["to_target"].get(f"{t:g}")) else "—"
                for t in record["targets"]
            )
            held = arm.get("holdout", {}).get("ratio_to_alg_star")
            reference = record.get("reference", "alg-star")
            setting = path.stem if reference in ("alg-star", "ridge") else f"{path.stem} (to {reference})"
            lines.append(
                f"| {setting} | `{arm['arm']}` | {arm['steps']:,} | {arm['cpu_ms_per_step']:.0f} | {reached} | "
                f"{arm['best']['ratio']:.2f} ({arm['best']['cpu_s'] / 60:.0f}) | "
                + (f"{held['mean']:.2f} {interval(held['ci90'])}" if held else "—")
                + " |"
            )
    if not found:
        lines.append("| (not run yet: `python benchmarks/lever_study.py SETTING`) | | | | | | |")
    return "\n".join(lines)


def _final_ratio(arm: dict) -> float:
    """An arm's kept checkpoint's held-out ratio where it was played, else its last validation ratio."""
    held = arm.get("holdout", {}).get("ratio_to_alg_star")
    return held["mean"] if held else arm["points"][-1]["ratio"]


LAW_BOOTSTRAP = 2000  # resamples of the steps law's points
LAW_POINTS = 3  # the fewest points a law is fitted on


def steps_law(record: dict, seed: int = 0) -> dict | None:
    """What the steps lever predicts for a lever study's setting, fitted on that setting's own curves
    only: a power law in training CPU-minutes, ``excess = c * minutes ** -b``, through the excess over
    what no training can beat (``ratio - 1`` for regret, ``alg-star`` being Bayes-optimal; the ratio
    itself for the head's MSE). Its points: the CPU recipe's kept checkpoint (its held-out ratio) and
    the last half of the steps arm's validation curve, which runs to its own whole schedule's end -- at
    least :data:`LAW_POINTS`. A pairs bootstrap over the points gives the 90% interval of ``b`` and of
    the CPU-minutes to each target; where the interval of ``b`` reaches 0 (no gain can be excluded), or
    a resample's law does not fall, the projection's upper end is unbounded (``None``: "cannot tell").
    Mid-schedule points are read while the learning rate still decays, so the law describes this
    schedule's curve, not a family of schedules; a projection is a hypothesis for a longer run to
    check. Returns ``None`` until both arms have run."""
    import numpy as np

    arms = {a["arm"]: a for a in record["arms"]}
    steps = next((a for name, a in arms.items() if name.startswith("steps-x")), None)
    if "cpu-recipe" not in arms or steps is None or record.get("reference", "alg-star") not in ("alg-star", "ridge"):
        return None  # (a benchmark as the reference has no floor that no training beats: no law)
    floor = 0.0 if record["metric"] == "obs-mse" else 1.0
    recipe = arms["cpu-recipe"]
    curve = steps["points"][len(steps["points"]) // 2 :]
    points = [(recipe["points"][-1]["cpu_s"] / 60, _final_ratio(recipe))]
    points += [(q["cpu_s"] / 60, q["ratio"]) for q in curve]
    t1, r1 = steps["points"][-1]["cpu_s"] / 60, _final_ratio(steps)
    law = {
        "recipe": points[0],
        "steps_arm": steps["arm"],
        "steps": (t1, r1),
        "points": len(points),
        "two_schedules": None,  # b through the two whole schedules' ends alone (no interval: two points)
        "exponent": None,
        "exponent_ci90": None,
        "minutes": {},
    }
    (t0, r0) = points[0]
    if min(r0, r1) - floor > 0 and r1 < r0:
        law["two_schedules"] = float(np.log((r0 - floor) / (r1 - floor)) / np.log(t1 / t0))
    pts = np.array([(t, r - floor) for t, r in points[1:] if r - floor > 0])
    if len(pts) + 1 < LAW_POINTS or points[0][1] - floor <= 0:
        return law
    x = np.log(np.concatenate([[points[0][0]], pts[:, 0]]))
    y = np.log(np.concatenate([[points[0][1] - floor], pts[:, 1]]))
    # The anchor's own sampling noise: its held-out 90% interval as a normal spread of its log excess.
    held = recipe.get("holdout", {}).get("ratio_to_alg_star", {}).get("ci90")
    anchor_sd = 0.0
    if held and held[0] - floor > 0 and held[1] is not None:
        anchor_sd = (np.log(held[1] - floor) - np.log(held[0] - floor)) / (2 * 1.6449)

    def fit(xs, ys):  # (b, a): log excess = a - b log minutes
        slope, a = np.polyfit(xs, ys, 1)
        return -slope, a

    b, a = fit(x, y)
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(LAW_BOOTSTRAP):  # the anchor always in, perturbed; the curve's points resampled
        idx = np.concatenate([[0], 1 + rng.integers(0, len(pts), len(pts))])
        ys = y[idx].copy()
        ys[0] += rng.normal(0.0, anchor_sd)
        boot.append(fit(x[idx], ys))
    boot = np.array(boot)
    lo, hi = np.percentile(boot[:, 0], [5, 95])
    law["exponent"], law["exponent_ci90"] = float(b), [float(lo), float(hi)]
    for target in record["targets"]:
        goal = target - floor
        if goal <= 0:
            law["minutes"][f"{target:g}"] = None
            continue
        # minutes = exp((a - log goal) / b); a resample that does not fall never gets there
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            reach = np.where(boot[:, 0] > 0, np.exp((boot[:, 1] - np.log(goal)) / boot[:, 0]), np.inf)
        m_lo, m_hi = np.percentile(reach, [5, 95])
        point = float(np.exp((a - np.log(goal)) / b)) if b > 0 else None
        law["minutes"][f"{target:g}"] = {
            "reached": r1 <= target,  # the steps arm's kept checkpoint is there already
            "minutes": point,
            "ci90": [float(m_lo) if np.isfinite(m_lo) else None, float(m_hi) if np.isfinite(m_hi) else None],
        }
    return law


def _minutes_cell(projection: dict | None) -> str:
    """A projected CPU-minute figure with its 90% interval: ``reached`` where the steps arm is there
    already, ``cannot tell`` where the interval is unbounded above."""
    if projection is None:
        return "—"
    point, (lo, hi) = projection["minutes"], projection["ci90"]
    if projection["reached"]:
        return "reached"
    if point is None or hi is None:
        return "cannot tell" + (f" (≥ {lo:,.0f})" if lo is not None else "")
    return f"{point:,.0f} [{lo:,.0f}, {hi:,.0f}]"


def lever_projection_table() -> str:
    """Per lever-study setting, the steps law (:func:`steps_law`) fitted on its own curves, and the
    CPU-minutes it puts each target at, with their bootstrap 90% intervals."""
    lines = [
        "| setting | CPU recipe: CPU-min, ratio | longer schedule: CPU-min, ratio | points | exponent `b` [90%] | `b` through the two schedules' ends | projected CPU-min to 2x / 1.5x / 1.25x (head: 4x / 2x / 1x) [90%] |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted((ROOT / "benchmarks" / "levers").glob("*.json")):
        record = json.loads(path.read_text())
        law = steps_law(record)
        if law is None:
            continue
        (t0, r0), (t1, r1) = law["recipe"], law["steps"]
        if law["exponent"] is None:
            projected, b = f"cannot tell (fewer than {LAW_POINTS} points above the floor)", "—"
        else:
            b = f"{law['exponent']:.2f} {interval(law['exponent_ci90'])}"
            projected = " / ".join(_minutes_cell(law["minutes"][f"{t:g}"]) for t in record["targets"])
        lines.append(
            f"| {path.stem} | {t0:.0f}, {r0:.2f} | `{law['steps_arm']}`: {t1:.0f}, {r1:.2f} | {law['points']} | {b} | "
            + ("—" if law["two_schedules"] is None else f"{law['two_schedules']:.2f}")
            + f" | {projected} |"
        )
    if len(lines) == 2:
        lines.append("| (no setting has both arms yet) | | | | | | |")
    return "\n".join(lines)


TABLES = {
    "levers": levers_table,
    "lever-projection": lever_projection_table,
    "real-demand": real_demand_table,
    "recipe": recipe_table,
    "tuning": tuning_table,
    "pretrained": pretrained_table,
    "experiments": experiments_table,
    "summary": summary_table,
    "finetune": finetune_table,
    "cost": cost_table,
}


def _ratio(v) -> str:
    return "undefined" if v is None else f"{v:.2f}×"


def _with_interval(v: dict, unit: str = "") -> str:
    mean = "undefined" if v["mean"] is None else f"{v['mean']:.2f}{unit}"
    return f"{mean} {interval(v['ci90'])}"


# FORMAT of an inline value -> how it is written
FORMATS = {
    "x": _ratio,  # a ratio: 1.07×
    "x-ci": lambda v: _with_interval(v, "×"),  # a paired ratio {mean, ci90}: 1.07× [1.05, 1.08]
    "ci": lambda v: _with_interval(v),  # a mean with its interval: 1.07 [1.05, 1.08]
    "interval": interval,  # [lo, hi]
    "int": lambda v: f"{v:,}",
    "min": lambda v: f"{v / 60:,.0f}",  # seconds as minutes
    **{f".{k}f": (lambda k: lambda v: f"{v:.{k}f}")(k) for k in range(5)},
    **{f".{k}g": (lambda k: lambda v: f"{v:.{k}g}")(k) for k in range(2, 5)},
    "text": str,
}
VALUE = re.compile(r"<!-- n:([^:|]+):([^|]*)\|([^ ]+) -->(.*?)<!-- /n -->")


def value_at(file: str, path: str) -> object:
    """The value at ``path`` (``/``-separated keys, indices, ``KEY=VALUE`` list picks) of the JSON ``file``."""
    node = _json(file)
    for part in path.split("/") if path else []:
        if isinstance(node, list) and "=" in part:
            key, _, want = part.partition("=")
            found = [item for item in node if isinstance(item, dict) and str(item.get(key)) == want]
            if len(found) != 1:
                raise KeyError(f"{len(found)} items with {key} = {want!r}")
            node = found[0]
        elif isinstance(node, list):
            node = node[int(part)]
        else:
            node = node[part]
    return node


_JSON: dict[str, object] = {}


def _json(file: str) -> object:
    if file not in _JSON:
        _JSON[file] = json.loads((ROOT / file).read_text())
    return _JSON[file]


def render_values(text: str, page: Path = README) -> str:
    """``text`` with every inline value (``<!-- n:FILE:PATH|FORMAT -->``) written from its JSON."""

    def one(m: re.Match) -> str:
        file, path, fmt, _ = m.groups()
        where = f"{page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page}: <!-- n:{file}:{path}|{fmt} -->"
        if fmt not in FORMATS:
            raise OMGPTError(f"{where}: unknown format {fmt!r} (one of {', '.join(FORMATS)})")
        try:
            value = value_at(file, path)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            raise OMGPTError(f"{where}: no such value ({type(e).__name__}: {e})") from None
        return f"<!-- n:{file}:{path}|{fmt} -->{FORMATS[fmt](value)}<!-- /n -->"

    return VALUE.sub(one, text)


def render(text: str, page: Path = README) -> str:
    """``text`` (the contents of ``page``) with each generated block and inline value it holds rebuilt."""
    up = Path(os.path.relpath(ROOT, page.parent)).as_posix()  # "." for the README, ".." for docs/
    for name, build in TABLES.items():
        pattern = re.compile(rf"(<!-- table:{name} -->\n)(?:.*?\n)?(<!-- /table:{name} -->)", re.S)
        if pattern.search(text):
            text = pattern.sub(lambda m: m.group(1) + _relink(build(), up) + "\n" + m.group(2), text)
    return render_values(text, page)


# What a result number in prose looks like: a ratio (1.07×, 2.5x), an interval of decimals, or a
# number with two or more decimals. Outside generated blocks, inline values and code, a page listed in
# PROSE_NUMBERS holds at most that many (a page not listed: none), so a number a test cannot check
# is never added, and the debt of the pages written before inline values only shrinks.
RESULT_NUMBER = re.compile(r"\d+\.\d+\s?[x×](?![\w-])|\[-?\d+\.\d+, -?\d+\.\d+\]|(?<![\w.])\d+\.\d{2,}(?![\w.])")


def free_numbers(text: str) -> list[str]:
    """The result numbers of a page's prose that no generated block or inline value holds."""
    text = re.sub(r"<!-- table:(\S+) -->.*?<!-- /table:\1 -->", "", text, flags=re.S)
    text = VALUE.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return RESULT_NUMBER.findall(text)


def _relink(markdown: str, up: str) -> str:
    """The builders' links, relative to the repository root, made relative to a page ``up`` from it."""
    if up == ".":
        return markdown
    return re.sub(r"\]\((?![a-z]+:|#|/)", f"]({up}/", markdown)


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    p.add_argument("--check", action="store_true", help="only check; exit 1 where a page differs")
    args = p.parse_args(argv)
    texts = {page: page.read_text() for page in pages()}
    missing = [name for name in TABLES if not any(f"<!-- table:{name} -->" in text for text in texts.values())]
    if missing:
        raise OMGPTError(f"no page (README.md, docs/*.md) has the <!-- table:{missing[0]} --> block")
    stale = []
    for page, text in texts.items():
        new = render(text, page)
        if new != text:
            stale.append(page.relative_to(ROOT).as_posix())
            if not args.check:
                write_text(page, new)
    if args.check:
        if stale:
            print(f"{', '.join(stale)}: generated tables differ from results/: run python -m tools.readme_tables")
            return 1
        return 0
    print(f"tables up to date{' (rewrote ' + ', '.join(stale) + ')' if stale else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
