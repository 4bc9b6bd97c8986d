"""The panels of ``omgpt experiment``, shared by every experiment kind: each an evaluation of one or
more trained models and the benchmarks on a test task (common random numbers, as ``omgpt evaluate``),
the numbers drawn from it (final regrets, curves, optimal rewards for reward improvement rates), and the
verdict against the best benchmark -- the one of lowest *validation* regret (:func:`best_on_validation`),
never the one the test numbers favour. What a kind measures beyond that is in its plug-in
(``omgpt/commands/experiment/kinds/``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from omgpt.analysis.report import best_benchmark, final_regrets
from omgpt.commands.experiment.config import Panel, parse_policies
from omgpt.commands.experiment.results import ModelRecord, PolicyNumbers, RegretPanel
from omgpt.tuning import read_tuned, tuned_constants, tuned_path

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
    return numbers, histories


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


def verdict(numbers: RegretPanel) -> str | None:
    """Where OMGPT's mean final regret stands against the best benchmark of the panel (chosen on
    validation: :func:`best_on_validation`; with several models, e.g. transformer vs LSTM, each model's)."""
    finals = final_regrets(numbers)
    ours = numbers.get("models_compared", [])
    if not ours or not numbers["benchmarks"]:
        return None
    best, bench = best_benchmark(numbers)
    if ours == ["omgpt"]:
        word = "below" if finals["omgpt"] < bench else "NOT below"
        return f"OMGPT {finals['omgpt']:.2f} is {word} the best benchmark ({best} {bench:.2f})"
    ranked = ", ".join(f"{k} {finals[k]:.2f}" for k in sorted(ours, key=finals.get))
    return f"models by mean final regret: {ranked}; best benchmark {best} {bench:.2f}"
