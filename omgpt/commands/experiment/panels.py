"""The panels of ``omgpt experiment``, shared by every experiment kind: each an evaluation of one or
more trained models and the benchmarks on a test task (common random numbers, as ``omgpt evaluate``),
the numbers drawn from it (final regrets, curves, optimal rewards for reward improvement rates), and the
verdict against the best benchmark -- the one of lowest *validation* regret (:func:`best_on_validation`),
never the one the test numbers favour. What a kind measures beyond that is in its plug-in
(``omgpt/commands/experiment/kinds/``).

A verdict has three states, read from a paired 90% interval over the panel's test environments
(:func:`versus_best`): *below* when the whole interval of OMGPT against the best benchmark lies on
OMGPT's side, *behind* when it lies wholly on the other, *level* when it holds the null. The statistic
is the ratio of mean final regrets, or their difference where a regret can be negative (queueing's).
How many environments a panel plays follows from a pilot on validation environments (:func:`size_runs`),
so that the effect the config names is resolved, not decided by one seed's noise.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import torch

from omgpt.analysis.report import best_benchmark, final_regrets
from omgpt.commands.experiment.config import Panel, parse_policies
from omgpt.commands.experiment.results import ModelRecord, PolicyNumbers, RegretPanel
from omgpt.tuning import read_tuned, tuned_constants, tuned_path

# A paired 90% interval has 5% on each side; a true gap of the effect then leaves its side of the null
# with probability 0.8: runs = ((z_0.95 + z_0.80) * sd / effect)^2 (the usual power calculation).
POWER_Z = 1.6449 + 0.8416
PILOT_RUNS = 200  # validation environments the sizing pilot plays (the tuning's count)
STATES = ("below", "level", "behind")  # a verdict: OMGPT's interval wholly below, holding the null, above
RELATION = {"below": "below", "level": "level with", "behind": "behind"}  # "OMGPT is ... the best benchmark"

NOT_BENCHMARKS = ("omgpt", "oracle", "alg-star", "noisy-oracle", "hindsight-linear")  # hindsight-linear: a yardstick


def _load_model(ckpt: str, device: str):
    from omgpt.model import load_model

    return load_model(ckpt, map_location=device).model


def policy_specs(panel: Panel, task, models: dict[str, ModelRecord], device: str) -> dict[str, tuple[str, dict]]:
    """``label -> (policy name, options)`` for the panel; a model acting past its trained horizon uses
    the context window ``W`` = that horizon (the paper's horizon generalisation)."""
    from omgpt.commands.evaluate import omgpt_options

    specs = {}
    for label, (policy, model_name) in parse_policies(panel.policies, panel.model).items():
        if policy != "omgpt":
            specs[label] = (policy, {"tuned_on": panel.tuned_on} if policy.endswith("-tuned") else {})
            continue
        model = _load_model(models[model_name]["ckpt"], device)
        specs[label] = ("omgpt", omgpt_options(task, panel.task_options, model, panel.horizon))
    return specs


def evaluate_panel(
    panel: Panel, models: dict[str, ModelRecord], *, runs: int, seed: int, device: str, rewards: bool = False
) -> tuple[RegretPanel, dict]:
    """Roll out every policy of the panel on ``runs`` test environments of ``seed`` (common random
    numbers), each model of ``models`` (name -> its record) acting with its ``ckpt`` on ``device``;
    returns ``(numbers, histories)``: the panel's numbers for ``experiment.json`` and each label's
    :class:`~omgpt.rollout.History`. ``rewards``: also record the optimal policy's expected cumulative
    reward (for reward improvement rates)."""
    from omgpt.analysis.report import ratios_to_alg_star, summarise
    from omgpt.evaluation import evaluate_policies
    from omgpt.policies import make_policy

    task = panel.episode_task()
    specs = policy_specs(panel, task, models, device)
    for (
        policy,
        options,
    ) in specs.values():  # fail on an inapplicable benchmark (or a missing tuning) before rolling anything out
        make_policy(policy, task, panel.horizon, **options)
    # Every benchmark in one call (a tuned variant at the paper's constants reuses its base's rollout
    # there); each model alone, as several share the policy name "omgpt". Every call draws the same
    # environments and noise from the seed, whatever it plays.
    benchmarks = {policy: options for policy, options in specs.values() if policy != "omgpt"}
    played = (
        evaluate_policies(task, benchmarks, runs, panel.horizon, seed, device=device, progress=False)
        if benchmarks
        else {}
    )
    histories = {
        label: played[policy]
        if policy != "omgpt"
        else evaluate_policies(task, {policy: options}, runs, panel.horizon, seed, device=device, progress=False)[
            policy
        ]
        for label, (policy, options) in specs.items()
    }
    stats = summarise(histories)
    ratios = ratios_to_alg_star(histories)
    numbers: RegretPanel = {  # the keys in the order experiment.json has always held them
        "title": panel.title,
        "task": panel.task,
        "task_options": panel.task_options,
        "horizon": panel.horizon,
        "model": panel.model,
        "window": specs.get("omgpt", ("", {}))[1].get("window"),
        "benchmarks": [k for k, (p, _) in specs.items() if p not in NOT_BENCHMARKS],
        "models_compared": [k for k, (p, _) in specs.items() if p == "omgpt"],
        "tuned_on": panel.tuned_on,
        "tuned_constants": {
            k: tuned_constants(p.removesuffix("-tuned"), "", {}, panel.horizon, panel.tuned_on)
            for k, (p, _) in specs.items()
            if p.endswith("-tuned")
        },
        **({"grid": panel.grid} if panel.grid is not None else {}),
        **({"note": panel.note} if panel.note else {}),
        "policies": {
            label: {
                **_policy_numbers(s, histories[label], rewards),
                **({"ratio_to_alg_star": ratios[label]} if label in ratios else {}),
            }
            for label, s in stats.items()
        },
    }
    benchmarks = {k: p for k, (p, _) in specs.items() if k in numbers["benchmarks"]}
    if benchmarks:
        numbers["best_benchmark"] = best_on_validation(panel, benchmarks, device)
        if numbers["models_compared"]:
            # alg-star too where it is played: prior-benefit's claim is about it as well
            compared = numbers["models_compared"] + (["alg-star"] if "alg-star" in histories else [])
            numbers["vs_best"] = versus_best(histories, compared, numbers["best_benchmark"]["name"])
    return numbers, histories


def _finals(history) -> np.ndarray:
    return history.cumulative_regret()[:, -1].double().numpy()


def versus_best(histories: dict, models: list[str], best: str) -> dict[str, dict]:
    """Each model's paired comparison with the best benchmark ``best`` on the same environments: the
    ratio of mean final regrets with its paired bootstrap 90% interval, or -- where a regret of either
    can be negative, so a ratio is undefined or flips sign -- the mean difference. Each with its
    :func:`state` (null 1 for a ratio, 0 for a difference). Returns ``label -> {"against", "statistic",
    "mean", "ci90", "runs", "state"}``."""
    from omgpt.analysis.report import paired_difference, paired_ratio

    reference = _finals(histories[best])
    finals = {label: _finals(histories[label]) for label in models}
    signed = reference.mean() <= 0 or min(v.min() for v in (reference, *finals.values())) < 0
    out = {}
    for label, ours in finals.items():
        stat = paired_difference(ours, reference) if signed else paired_ratio(ours, reference)
        kind = "difference" if signed else "ratio"
        out[label] = {"against": best, "statistic": kind, **stat, "state": state(stat["ci90"], kind)}
    return out


def state(ci90: list | None, statistic: str) -> str:
    """The three-state verdict of a paired 90% interval ``[lo, hi]`` (``hi`` None: open above) of OMGPT
    against a reference: ``below`` when it lies wholly under the null (1 for a ratio, 0 for a
    difference), ``behind`` when wholly over it, else ``level`` (no interval: one run, ``level``)."""
    null = 1.0 if statistic == "ratio" else 0.0
    if ci90 is None:
        return "level"
    lo, hi = ci90
    if hi is not None and hi < null:
        return "below"
    if lo > null:
        return "behind"
    return "level"


def size_runs(
    panel: Panel,
    models: dict[str, ModelRecord],
    *,
    effect: float,
    floor: int,
    cap: int,
    seed: int,
    device: str = "cpu",
    pilot: int = PILOT_RUNS,
) -> dict:
    """How many test environments ``panel`` plays so that its verdict resolves ``effect`` (a fraction of
    the best benchmark's mean final regret): each OMGPT model and the best benchmark (chosen on
    validation, :func:`best_on_validation`) play ``pilot`` *validation* environments of ``seed`` (the
    panel's test task's validation part), and the paired per-environment spread ``sd`` of the final
    regret differences gives ``((z_0.95 + z_0.80) sd / (effect |mean|))^2`` runs (:data:`POWER_Z`): a
    true gap of the effect then puts the 90% interval wholly on its side with probability 0.8. Clamped
    to ``[floor, cap]``. Returns the record the report shows: ``{"runs", "needed", "effect", "floor",
    "cap", "pilot": {"runs", "seed", "best", "best_mean", "sd"}}`` (the largest ``sd`` of several models)."""
    from omgpt.evaluation import evaluate_policies
    from omgpt import seeding

    seeding.check_validation_seed(seed, "the sizing pilot's seed")
    task = panel.episode_task().validation_task()
    pilot = min(pilot, getattr(task, "windows", None) or pilot)  # a data set's validation windows, each once
    specs = policy_specs(panel, task, models, device)
    benchmarks = {k: p for k, (p, _) in specs.items() if p not in NOT_BENCHMARKS}
    ours = [k for k, (p, _) in specs.items() if p == "omgpt"]
    best = best_on_validation(panel, benchmarks, device)["name"]
    played = {
        label: _finals(
            evaluate_policies(
                task, {specs[label][0]: specs[label][1]}, pilot, panel.horizon, seed, device=device, progress=False
            )[specs[label][0]]
        )
        for label in [best, *ours]
    }
    sd = max(float(np.std(played[k] - played[best], ddof=1)) for k in ours)
    needed = runs_for(sd, float(played[best].mean()), effect)
    return {
        "runs": int(min(cap, max(floor, needed))),
        "needed": needed,
        "effect": effect,
        "floor": floor,
        "cap": cap,
        "pilot": {"runs": pilot, "seed": seed, "best": best, "best_mean": float(played[best].mean()), "sd": sd},
    }


def runs_for(sd: float, mean: float, effect: float) -> int:
    """Paired runs whose 90% interval leaves the null with probability 0.8 when the true gap is
    ``effect * |mean|`` and the per-run differences spread ``sd``: ``((z_0.95 + z_0.80) sd / gap)^2``."""
    gap = effect * (abs(mean) or 1.0)
    return max(2, math.ceil((POWER_Z * sd / gap) ** 2))


def sizing_words(sizing: dict) -> str:
    """How a panel's runs were sized, in one sentence for its report."""
    pilot = sizing["pilot"]
    bound = (
        " (the cap)"
        if sizing["runs"] == sizing["cap"] < sizing["needed"]
        else " (the floor)"
        if sizing["runs"] == sizing["floor"] > sizing["needed"]
        else ""
    )
    return (
        f"{sizing['runs']:,} test runs{bound}: resolving a gap of {sizing['effect']:.0%} of the best benchmark's regret needs "
        f"{sizing['needed']:,} (paired spread {pilot['sd']:.3g} against {pilot['best']}'s mean {pilot['best_mean']:.3g} "
        f"on {pilot['runs']} validation environments of seed {pilot['seed']:,}; floor {sizing['floor']:,}, cap {sizing['cap']:,})."
    )


def best_on_validation(panel: Panel, benchmarks: dict[str, str], device: str = "cpu") -> dict:
    """The panel's best benchmark: of ``benchmarks`` (label -> policy, the paper's and the tuned variants
    alike), the one of lowest mean final regret on the *validation* environments of the setting the
    panel's benchmarks are tuned on (``panel.tuned_on``: the prior OMGPT was trained on, at the panel's
    horizon), never the test numbers the panel reports.

    The regrets are compared on one set of environments only. The tuned file records the validation
    regret of the tuned constants (``final_regret``) and of the paper's (``paper``), each on its
    ``validation`` runs and seed; the panel's environments are those most of the recorded entries share
    (``omgpt tune``'s, 200 runs of seed 10,001, or a data set's validation windows). A benchmark with no
    record there (no free constants, e.g. ``erm-lp``), or one recorded on other environments, is rolled
    out on them here with the same common random numbers. Returns ``{"name", "chosen_by",
    "environments", "validation_regret" (label -> mean, s.e.), "rolled_out"}``."""
    from omgpt import seeding
    from omgpt.commands.tune import VALIDATION_RUNS, _validation_regret
    from omgpt.tasks import make_episode_task

    path = tuned_path(panel.tuned_on)
    entries = read_tuned(path)["policies"] if path.is_file() else {}
    recorded = {}
    for label, policy in benchmarks.items():
        entry = entries.get(policy.removesuffix("-tuned"))
        if entry is None:
            continue
        if policy.endswith("-tuned"):  # (a file tuned before final_regret was recorded: its curve's best point)
            value = entry.get("final_regret") or min(
                (p["final_regret"] for p in entry["curve"]), key=lambda r: r["mean"]
            )
        elif "paper" in entry:
            value = entry["paper"]["final_regret"]
        else:
            continue
        recorded[label] = (
            {"mean": value["mean"], "se": value["se"]},
            (entry["validation"]["runs"], entry["validation"]["seed"]),
        )
    task = make_episode_task(panel.tuned_task, panel.tuned_options, panel.horizon).validation_task()
    if recorded:
        runs, seed = Counter(envs for _, envs in recorded.values()).most_common(1)[0][0]
    else:
        runs, seed = min(VALIDATION_RUNS, getattr(task, "windows", None) or VALIDATION_RUNS), seeding.TUNING_SEED
    regrets, rolled = {}, []
    for label, policy in benchmarks.items():
        if label in recorded and recorded[label][1] == (runs, seed):
            regrets[label] = recorded[label][0]
        else:
            options = {"tuned_on": panel.tuned_on} if policy.endswith("-tuned") else {}
            regrets[label] = _validation_regret(task, policy, options, runs, panel.horizon, seed, device)
            rolled.append(label)
    return {
        "name": min(regrets, key=lambda k: regrets[k]["mean"]),
        "chosen_by": "validation regret",
        "environments": {"setting": panel.tuned_on, "runs": runs, "seed": seed},
        "validation_regret": regrets,
        "rolled_out": rolled,
    }


def _policy_numbers(stats: dict, history, rewards: bool = False) -> PolicyNumbers:
    from omgpt.analysis.report import final_regret

    return {
        "final_regret": final_regret(stats["regret"]),
        "final_suboptimality": {"mean": float(stats["suboptimality"]["mean"][-1])},
        **({"optimal_reward": float(optimal_reward(history).mean())} if rewards else {}),
        "curves": {k: {"mean": rounded(v["mean"]), "band90": rounded(v["band90"])} for k, v in stats.items()},
    }


def rounded(values) -> list:
    """Curves as lists with 4 decimals (the JSON stays small; the plots cannot tell)."""
    return np.round(np.asarray(values, dtype=np.float64), 4).tolist()


def optimal_reward(history) -> torch.Tensor:
    """``Σ_t`` of the optimal rewards the rollout recorded per run (``r(X_t, a*_t)`` in the state each
    step was played in): the optimal policy's expected cumulative reward, so a policy's reward is this
    minus its regret (reward improvement rates, paper §5.1.2)."""
    return history.optimal_rewards.double().sum(1)


def panel_state(numbers: dict, label: str = "omgpt") -> str | None:
    """The three-state verdict of model ``label`` on a regret panel (``numbers["vs_best"]``), or None
    where the panel compares nothing (no model or no benchmark) or predates the paired comparison."""
    return (numbers.get("vs_best") or {}).get(label, {}).get("state")


def versus_words(paired: dict) -> str:
    """A paired comparison (:func:`versus_best`) in words: ``0.82x [0.75, 0.90]`` or ``-1.20 [-2.0, -0.4]``."""
    from omgpt.analysis.report import interval

    mean = "undefined" if paired["mean"] is None else f"{paired['mean']:.2f}"
    unit = "×" if paired["statistic"] == "ratio" else ""
    what = "ratio" if paired["statistic"] == "ratio" else "difference"
    return f"paired {what} {mean}{unit} {interval(paired['ci90'])} over {paired['runs']:,} runs"


def verdict(numbers: RegretPanel) -> str | None:
    """Where OMGPT stands against the best benchmark of the panel (chosen on validation:
    :func:`best_on_validation`; with several models, e.g. transformer vs LSTM, each model's): its three
    state (:func:`state`) and the paired interval it is read from."""
    finals = final_regrets(numbers)
    ours = numbers.get("models_compared", [])
    if not ours or not numbers["benchmarks"]:
        return None
    best, bench = best_benchmark(numbers)
    paired = numbers.get("vs_best") or {}
    if ours == ["omgpt"]:
        if "omgpt" not in paired:
            return f"OMGPT {finals['omgpt']:.2f} against the best benchmark ({best} {bench:.2f}): no paired interval (recorded before verdicts were paired: run the experiment again)"
        p = paired["omgpt"]
        return f"OMGPT {finals['omgpt']:.2f} is {RELATION[p['state']]} the best benchmark ({best} {bench:.2f}): {versus_words(p)}"
    ranked = ", ".join(
        f"{k} {finals[k]:.2f}" + (f" ({paired[k]['state']}: {versus_words(paired[k])})" if k in paired else "")
        for k in sorted(ours, key=finals.get)
    )
    return f"models by mean final regret: {ranked}; best benchmark {best} {bench:.2f}"
