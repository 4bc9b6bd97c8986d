"""The panels of ``omgpt experiment``, shared by every experiment kind: each an evaluation of one or
more trained models and the benchmarks on a test task (common random numbers, as ``omgpt evaluate``),
the numbers drawn from it (final regrets, curves, optimal rewards for reward improvement rates), and the
verdict against the best benchmark. What a kind measures beyond that is in its plug-in
(``omgpt/commands/experiment/kinds/``).
"""
from __future__ import annotations

import numpy as np
import torch

from omgpt.analysis.report import final_regrets
from omgpt.commands.experiment.config import parse_policies
from omgpt.tuning import tuned_constants

NOT_BENCHMARKS = ("omgpt", "oracle", "alg-star", "noisy-oracle", "hindsight-linear")  # hindsight-linear: a yardstick


def _load_model(ckpt: str, device: str):
    from omgpt.model import load_model

    return load_model(ckpt, map_location=device).model


def _policy_specs(panel: dict, task, models: dict[str, dict], device: str) -> dict[str, tuple[str, dict]]:
    """``label -> (policy name, options)`` for the panel; a model acting past its trained horizon uses
    the context window ``W`` = that horizon (the paper's horizon generalisation)."""
    from omgpt.commands.evaluate import omgpt_options

    specs = {}
    for label, (policy, model_name) in parse_policies(panel["policies"], panel["model"]).items():
        if policy != "omgpt":
            specs[label] = (policy, {"tuned_on": panel["tuned_on"]} if policy.endswith("-tuned") else {})
            continue
        model = _load_model(models[model_name]["ckpt"], device)
        specs[label] = ("omgpt", omgpt_options(task, panel["task_options"], model, panel["horizon"]))
    return specs


def evaluate_panel(panel: dict, models: dict[str, dict], runs: int, seed: int, device: str, rewards: bool = False) -> tuple[dict, dict]:
    """Roll out every policy of the panel; returns ``(numbers, histories)``. ``rewards``: also record
    the optimal policy's expected cumulative reward (for reward improvement rates)."""
    from omgpt.analysis.report import ratios_to_alg_star, summarise
    from omgpt.evaluation import evaluate_policies
    from omgpt.policies import make_policy
    from omgpt.tasks import make_episode_task

    task = make_episode_task(panel["task"], panel["task_options"], panel["horizon"])
    specs = _policy_specs(panel, task, models, device)
    for policy, options in specs.values():  # fail on an inapplicable benchmark (or a missing tuning) before rolling anything out
        make_policy(policy, task, panel["horizon"], **options)
    # Every benchmark in one call (a tuned variant at the paper's constants reuses its base's rollout
    # there); each model alone, as several share the policy name "omgpt". Every call draws the same
    # environments and noise from the seed, whatever it plays.
    benchmarks = {policy: options for policy, options in specs.values() if policy != "omgpt"}
    played = evaluate_policies(task, benchmarks, runs, panel["horizon"], seed, device=device, progress=False) if benchmarks else {}
    histories = {label: played[policy] if policy != "omgpt" else
                 evaluate_policies(task, {policy: options}, runs, panel["horizon"], seed, device=device, progress=False)[policy]
                 for label, (policy, options) in specs.items()}
    stats = summarise(histories)
    ratios = ratios_to_alg_star(histories)
    numbers = {
        "title": panel["title"], "task": panel["task"], "task_options": panel["task_options"], "horizon": panel["horizon"],
        "model": panel["model"], "window": specs.get("omgpt", ("", {}))[1].get("window"),
        "benchmarks": [k for k, (p, _) in specs.items() if p not in NOT_BENCHMARKS],
        "models_compared": [k for k, (p, _) in specs.items() if p == "omgpt"],
        "tuned_on": panel["tuned_on"],
        "tuned_constants": {k: tuned_constants(p.removesuffix("-tuned"), "", {}, panel["horizon"], panel["tuned_on"])
                            for k, (p, _) in specs.items() if p.endswith("-tuned")},
        **({"grid": panel["grid"]} if "grid" in panel else {}),
        **({"note": panel["note"]} if panel.get("note") else {}),
        "policies": {label: {**_policy_numbers(s, histories[label], rewards), **({"ratio_to_alg_star": ratios[label]} if label in ratios else {})}
                     for label, s in stats.items()},
    }
    return numbers, histories


def _policy_numbers(stats: dict, history, rewards: bool = False) -> dict:
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


def verdict(numbers: dict) -> str | None:
    """Where OMGPT's mean final regret stands against the best benchmark of the panel (with several
    models, e.g. transformer vs LSTM, each model's)."""
    finals = final_regrets(numbers)
    bench = {k: finals[k] for k in numbers["benchmarks"]}
    ours = numbers.get("models_compared", [])
    if not ours or not bench:
        return None
    best = min(bench, key=bench.get)
    if ours == ["omgpt"]:
        word = "below" if finals["omgpt"] < bench[best] else "NOT below"
        return f"OMGPT {finals['omgpt']:.2f} is {word} the best benchmark ({best} {bench[best]:.2f})"
    ranked = ", ".join(f"{k} {finals[k]:.2f}" for k in sorted(ours, key=finals.get))
    return f"models by mean final regret: {ranked}; best benchmark {best} {bench[best]:.2f}"
