"""``omgpt experiment NAME``: one paper figure, end to end, from one config.

An experiment (``configs/experiments/NAME.yaml``) names the **models** it needs -- each one
``omgpt fit`` run: a task, its options, a horizon and extra fit arguments -- and the **panels** it
draws -- each an evaluation of one or more of those models and the benchmarks on a test task
(possibly shifted, longer, or of another demand type than the model was trained on). Running it:

1. trains every model that is not trained yet (``--jobs N`` at once, each in its own ``omgpt fit``
   process), in a content-addressed folder ``MODELS_DIR/<task>-<hash of its fit arguments>``: a model
   is trained once and shared by every experiment that asks for the same run (the main results'
   pricing model is also the distribution-shift and the LSTM comparison's transformer); an
   interrupted fit resumes from its ``last.ckpt``;
2. evaluates every panel on ``runs`` fresh test environments (common random numbers across policies,
   as ``omgpt evaluate``), OMGPT acting with the checkpoint of best validation regret;
3. writes ``OUT/experiment.json`` (every number, the curves included), the figures as PNG, and
   ``OUT/report.md`` (the paper's claim, the command, tables, figures, per-panel verdicts).

Scales. Every experiment runs at two scales with the same command: ``--scale paper`` (the paper's
model and Algorithm 1: ``configs/scale/paper.yaml`` on the defaults of ``configs/base.yaml``; for
GPUs) and ``--scale cpu`` (``configs/scale/cpu.yaml``: minutes per model on one CPU core). Any
mapping in an experiment config may hold ``cpu:`` / ``paper:`` keys whose contents override its
siblings at that scale (e.g. ``horizon: 100`` with ``cpu: {horizon: 50}``).

Figure kinds (``figure:`` in the config): ``curves`` (the paper's regret / suboptimality rows, mean
with a 90% band, final regret in the legend), ``advantage`` (reward improvement rate of OMGPT over
the best benchmark on a grid), ``alg-star-match`` (``TF - Alg*`` along the model's own histories:
sample paths and histograms) and ``demand-prediction`` (observation head vs ridge regression).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
import yaml

from omgpt.errors import OMGPTError
from omgpt.files import output_folder, write_json, write_text
from omgpt.resources import CONFIGS

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = CONFIGS / "experiments"
BASE_CONFIG = CONFIGS / "base.yaml"  # loaded first by every `omgpt fit` (omgpt.lightning_cli.build_cli)
SCALES = {"cpu": CONFIGS / "scale" / "cpu.yaml", "paper": CONFIGS / "scale" / "paper.yaml"}
FIGURES = ("curves", "advantage", "alg-star-match", "demand-prediction")
NOT_BENCHMARKS = ("omgpt", "oracle", "alg-star", "noisy-oracle")
EXPERIMENT_FILES = ("experiment.json", "report.md", "*.png")  # what a report folder holds


# --------------------------------------------------------------------------------------------------
# Configs.
def available() -> dict[str, str]:
    """Experiment name -> its title."""
    return {p.stem: (yaml.safe_load(p.read_text()) or {}).get("title", "") for p in sorted(EXPERIMENTS.glob("*.yaml"))}


def at_scale(node, scale: str):
    """Resolve the ``cpu:`` / ``paper:`` overrides of every mapping in ``node`` for ``scale``."""
    if isinstance(node, list):
        return [at_scale(v, scale) for v in node]
    if not isinstance(node, dict):
        return node
    resolved = {k: at_scale(v, scale) for k, v in node.items() if k not in SCALES}
    override = node.get(scale)
    return _merge(resolved, at_scale(override, scale)) if override else resolved


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_experiment(name: str, scale: str, horizon: int | None = None) -> dict:
    """The experiment ``name`` resolved at ``scale``: every model and panel with its task, options and
    horizon filled in. ``horizon`` overrides the experiment's (for quick runs)."""
    path = EXPERIMENTS / f"{name}.yaml"
    if not path.is_file():
        raise OMGPTError(f"unknown experiment {name!r}; available: {', '.join(available())} (omgpt experiment --list)")
    if scale not in SCALES:
        raise OMGPTError(f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
    exp = at_scale(yaml.safe_load(path.read_text()), scale)
    exp["name"], exp["scale"] = name, scale
    if exp.get("figure", "curves") not in FIGURES:
        raise OMGPTError(f"{path}: figure must be one of {', '.join(FIGURES)}")
    default_horizon = horizon or exp.get("horizon")
    for model_name, m in exp["models"].items():
        m.setdefault("task_options", {})
        m.setdefault("args", {})
        m["horizon"] = horizon or m.get("horizon") or default_horizon
        if not m.get("task") or not m["horizon"]:
            raise OMGPTError(f"{path}: model {model_name!r} needs a task and a horizon")
    for panel in exp["panels"]:
        model = exp["models"].get(panel.get("model"))
        if model is None:
            raise OMGPTError(f"{path}: panel {panel.get('title')!r} names no model of this experiment")
        panel.setdefault("task", model["task"])
        panel["task_options"] = {**model["task_options"], **(panel.get("task_options") or {})}
        panel["horizon"] = int(model["horizon"] * panel.get("horizon_factor", 1))
        panel.setdefault("figure_file", exp.get("figure", "curves"))
        panel.setdefault("policies", [])
        for label, (policy, model_name) in parse_policies(panel["policies"], panel["model"]).items():
            if model_name is not None and model_name not in exp["models"]:
                raise OMGPTError(f"{path}: panel {panel['title']!r} policy {label!r} names an unknown model")
    return exp


def parse_policies(entries: list[str], default_model: str) -> dict[str, tuple[str, str | None]]:
    """Policy entries -> ``label -> (policy name, model name or None)``. ``omgpt`` is the panel's
    model; ``omgpt@NAME`` is another model of the experiment, labelled ``NAME``."""
    out = {}
    for entry in entries:
        policy, _, model = entry.partition("@")
        if policy == "omgpt":
            out[model or "omgpt"] = ("omgpt", model or default_model)
        else:
            out[policy] = (policy, None)
    return out


# --------------------------------------------------------------------------------------------------
# Training.
def fit_arguments(model: dict, scale: str, extra_configs: list[str]) -> list[str]:
    """The ``omgpt fit`` arguments of one model (without where it writes)."""
    args = ["--config", str(SCALES[scale])]
    for cfg in [*model.get("configs", []), *extra_configs]:
        args += ["--config", str(ROOT / cfg) if not Path(cfg).is_absolute() and (ROOT / cfg).is_file() else str(cfg)]
    args += ["--model.task", model["task"], "--model.task_options", json.dumps(model["task_options"], sort_keys=True)]
    args += ["--model.horizon", str(model["horizon"])]
    for key, value in sorted(model["args"].items()):
        args += [f"--{key}", json.dumps(value) if isinstance(value, (dict, list, bool)) or value is None else str(value)]
    return args


def run_key(task: str, args: list[str]) -> str:
    """``task-<hash>``: the hash covers the fit arguments (config paths relative to the repository, so
    a moved clone keeps its models) and the content of every config file, ``configs/base.yaml`` -- the
    layer every fit starts from -- included, so a changed config trains a new model instead of reusing
    a stale one. (Code changes are not hashed: delete the models folder after changing the model.)"""
    shown = [_shown(Path(a)) if i and args[i - 1] == "--config" else a for i, a in enumerate(args)]
    h = hashlib.sha1(json.dumps(shown).encode())
    configs = [BASE_CONFIG] + [Path(a) for i, a in enumerate(args) if i and args[i - 1] == "--config"]
    for cfg in configs:
        h.update(cfg.read_bytes())
    return f"{task}-{h.hexdigest()[:10]}"


def best_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint of best validation regret (ModelCheckpoint keeps one), else ``last.ckpt``."""
    ckpts = run_dir / "run" / "checkpoints"
    best = sorted(p for p in ckpts.glob("*.ckpt") if p.name != "last.ckpt")
    if best:
        return best[-1]
    last = ckpts / "last.ckpt"
    return last if last.is_file() else None


def train_model(name: str, model: dict, scale: str, models_dir: Path, extra_configs: list[str], threads: int | None) -> dict:
    """Train one model unless its run folder already holds a finished run; returns its record."""
    args = fit_arguments(model, scale, extra_configs)
    key = run_key(model["task"], args)
    run_dir = models_dir / key
    done = run_dir / "done.json"
    if done.is_file():
        record = json.loads(done.read_text())
        record["ckpt"] = str(run_dir / record["ckpt"])  # stored relative: the models folder can move
        record["command"] = _fit_command(args)
        print(f"  {name}: reusing {_shown(Path(record['ckpt']))}")
        return record
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "omgpt", "fit", *args, "--trainer.logger.init_args.save_dir", str(models_dir),
           "--trainer.logger.init_args.name", key, "--trainer.logger.init_args.version", "run"]
    last = run_dir / "run" / "checkpoints" / "last.ckpt"
    if last.is_file():  # an interrupted fit: continue it exactly (RNG, data stream, scheduler)
        cmd += ["--ckpt_path", str(last)]
        metrics = run_dir / "run" / "metrics.csv"
        if metrics.is_file():  # the CSV logger starts a fresh metrics.csv: keep the earlier part
            metrics.rename(metrics.with_name(f"metrics-part{len(list(metrics.parent.glob('metrics-part*.csv')))}.csv"))
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    print(f"  {name}: training -> {run_dir} (log: {run_dir / 'train.log'})", flush=True)
    start = time.perf_counter()
    with open(run_dir / "train.log", "a") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if code != 0:
        tail = (run_dir / "train.log").read_text().strip().splitlines()[-1:] or [""]
        raise OMGPTError(f"training model {name!r} failed (exit {code}): {tail[0]} -- see {run_dir / 'train.log'}")
    ckpt = best_checkpoint(run_dir)
    if ckpt is None:
        raise OMGPTError(f"training model {name!r} wrote no checkpoint in {run_dir}")
    record = {"model": name, "key": key, "ckpt": str(ckpt.relative_to(run_dir)), "train_seconds": round(time.perf_counter() - start, 1),
              "command": _fit_command(args), **_training_summary(run_dir)}
    write_json(record, done)
    record["ckpt"] = str(ckpt)
    print(f"  {name}: trained in {record['train_seconds']:.0f} s, val/regret of the kept checkpoint {record.get('best_val_regret')}", flush=True)
    return record


def _fit_command(args: list[str]) -> str:
    """The model's ``omgpt fit`` command as a shell line (config paths relative to the repository)."""
    return "omgpt fit " + shlex.join(_shown(Path(a)) if Path(a).is_absolute() else a for a in args)


def _shown(path: Path) -> str:
    """A path as reports print it: relative to the repository when inside it (no machine paths)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _training_summary(run_dir: Path) -> dict:
    """Steps trained, the validation regret curve, and the validation regret of the kept checkpoint
    (lowest ``val/regret_ucb``, the mean + one sd rule, where logged; else lowest ``val/regret``)."""
    import csv

    run = run_dir / "run"
    parts = sorted(run.glob("metrics-part*.csv"), key=lambda p: int(p.stem.removeprefix("metrics-part"))) + [run / "metrics.csv"]
    by_step = {}  # a resumed fit's parts, later ones winning where they overlap: step -> (regret, ucb)
    for part in (p for p in parts if p.is_file()):
        for r in csv.DictReader(part.open()):
            if r.get("val/regret"):
                ucb = float(r["val/regret_ucb"]) if r.get("val/regret_ucb") else None
                by_step[int(r["step"]) + 1] = (round(float(r["val/regret"]), 4), ucb)
    if not by_step:
        return {}
    curve = [[step, v] for step, (v, _) in sorted(by_step.items())]
    kept = min(by_step.values(), key=lambda v: v[0] if v[1] is None else v[1])
    return {"val_regret": curve, "best_val_regret": kept[0], "steps": curve[-1][0],
            "selected_by": "val/regret" if kept[1] is None else "val/regret_ucb"}


def train_all(exp: dict, models_dir: Path, extra_configs: list[str], jobs: int) -> dict[str, dict]:
    names = list(exp["models"])
    threads = 1 if jobs > 1 and "OMP_NUM_THREADS" not in os.environ else None
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {n: pool.submit(train_model, n, exp["models"][n], exp["scale"], models_dir, extra_configs, threads) for n in names}
        return {n: f.result() for n, f in futures.items()}


# --------------------------------------------------------------------------------------------------
# Evaluation.
def _load_model(ckpt: str, device: str):
    from omgpt.module import load_module

    module = load_module(ckpt, map_location=device)
    return module.model.to(device).eval()


def _policy_specs(panel: dict, task, models: dict[str, dict], device: str) -> dict[str, tuple[str, dict]]:
    """``label -> (policy name, options)`` for the panel; a model acting past its trained horizon uses
    the context window ``W`` = that horizon (the paper's horizon generalisation)."""
    from omgpt.evaluate import omgpt_options

    specs = {}
    for label, (policy, model_name) in parse_policies(panel["policies"], panel["model"]).items():
        if policy != "omgpt":
            specs[label] = (policy, {})
            continue
        model = _load_model(models[model_name]["ckpt"], device)
        specs[label] = ("omgpt", omgpt_options(task, panel["task_options"], model, panel["horizon"]))
    return specs


def evaluate_panel(panel: dict, models: dict[str, dict], runs: int, seed: int, device: str, rewards: bool = False) -> tuple[dict, dict]:
    """Roll out every policy of the panel; returns ``(numbers, histories)``. ``rewards``: also record
    the optimal policy's expected cumulative reward (for reward improvement rates)."""
    from analysis.report import summarise
    from omgpt.evaluate import evaluate_policies
    from omgpt.policies import make_policy
    from omgpt.tasks import make_episode_task

    task = make_episode_task(panel["task"], panel["task_options"], panel["horizon"])
    specs = _policy_specs(panel, task, models, device)
    for policy, options in specs.values():  # fail on an inapplicable benchmark before rolling anything out
        make_policy(policy, task, **options)
    histories = {}
    for label, (policy, options) in specs.items():
        histories[label] = evaluate_policies(task, {policy: options}, runs, panel["horizon"], seed, device=device, progress=False)[policy]
    stats = summarise(histories)
    numbers = {
        "title": panel["title"], "task": panel["task"], "task_options": panel["task_options"], "horizon": panel["horizon"],
        "model": panel["model"], "window": specs.get("omgpt", ("", {}))[1].get("window"),
        "benchmarks": [k for k, (p, _) in specs.items() if p not in NOT_BENCHMARKS],
        "models_compared": [k for k, (p, _) in specs.items() if p == "omgpt"],
        **({"grid": panel["grid"]} if "grid" in panel else {}),
        "policies": {label: _policy_numbers(s, histories[label], rewards) for label, s in stats.items()},
    }
    return numbers, histories


def _policy_numbers(stats: dict, history, rewards: bool = False) -> dict:
    from analysis.report import final_regret

    return {
        "final_regret": final_regret(stats["regret"]),
        "final_suboptimality": {"mean": float(stats["suboptimality"]["mean"][-1])},
        **({"optimal_reward": float(optimal_reward(history).mean())} if rewards else {}),
        "curves": {k: {"mean": _rounded(v["mean"]), "band90": _rounded(v["band90"])} for k, v in stats.items()},
    }


def _rounded(values) -> list:
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
    finals = {k: v["final_regret"]["mean"] for k, v in numbers["policies"].items()}
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


def alg_star_match(panel: dict, history, seed: int) -> dict:
    """``TF(H_t) - Alg*(H_t)`` along the model's own histories: ``Alg*`` is replayed on the histories
    OMGPT generated (same contexts, actions, observations), so both decide on the same ``H_t``.

    For the bandit (the paper's convention) the difference is in expected reward: the reward of
    OMGPT's arm minus the reward ``Alg*``'s posterior sampling gets in expectation over its draw,
    ``Σ_γ P(γ | H_t) r(a*_γ)``, so the histogram measures the model and not ``Alg*``'s own sampling
    noise (one draw would add mean |diff| ~0.03 / 0.14 on 4 / 100 environments by itself)."""
    from omgpt.policies import make_policy
    from omgpt.rollout import replay
    from omgpt.tasks import make_episode_task

    task = make_episode_task(panel["task"], panel["task_options"], panel["horizon"])
    alg = make_policy("alg-star", task)

    def posterior_reward(alg, t, x):  # the bandit: expected reward of Alg*'s draw, over the posterior before O_t
        arms = alg.candidate_actions(t, x)  # (B, N, arms)
        envs = {k: v.repeat_interleave(arms.shape[1], 0) for k, v in history.envs.items()}  # each run's true environment per candidate
        r = task.expected_reward(envs, x.repeat_interleave(arms.shape[1], 0), arms.flatten(0, 1), t).reshape(arms.shape[:2])
        return (alg.posterior() * r.double()).sum(-1)

    alg_actions, alg_rewards = replay(alg, history, torch.Generator().manual_seed(seed), posterior_reward if task.discrete else None)
    if task.discrete:
        diff = (history.rewards.double() - torch.stack(alg_rewards, 1))[..., None].float()
        as_value = lambda a: a.argmax(-1, keepdim=True).float()  # arm index for the sample path
    else:
        diff = history.actions - alg_actions
        as_value = lambda a: a
    return {
        "diff": _rounded(diff.reshape(-1, diff.shape[-1])),
        "mean_abs_diff": float(diff.norm(dim=-1).mean()),
        "discrete": task.discrete,  # bandit: differences are rewards, sample paths are arm indices
        "path": {  # the first test environment's first 30 steps
            "optimal": as_value(history.optimal_actions[0, :30])[:, 0].tolist(),
            "omgpt": as_value(history.actions[0, :30])[:, 0].tolist(),
            "alg-star": as_value(alg_actions[0, :30])[:, 0].tolist(),
        },
    }


def demand_prediction_panel(panel: dict, models: dict[str, dict], runs: int, seed: int, device: str) -> dict:
    """``omgpt evaluate --demand-prediction`` for one panel; its per-panel files go to a scratch
    folder (the experiment keeps the numbers in experiment.json and draws one figure of all panels)."""
    import tempfile

    from omgpt.evaluate import run_demand_prediction

    with tempfile.TemporaryDirectory() as scratch:
        summary = run_demand_prediction(
            models[panel["model"]]["ckpt"], panel["task_options"], runs, panel["horizon"], None, seed,
            scratch, task_name=panel["task"], device=device, progress=False,
        )
    return {**summary, "ckpt": _shown(Path(summary["ckpt"]))}


# --------------------------------------------------------------------------------------------------
# The whole experiment.
def run_experiment(
    name: str,
    scale: str = "cpu",
    out: str | None = None,
    models_dir: str | None = None,
    jobs: int = 1,
    runs: int | None = None,
    horizon: int | None = None,
    fit_configs: list[str] | None = None,
    seed: int = 0,
    device: str | None = None,
    train_only: bool = False,
) -> dict | None:
    exp = load_experiment(name, scale, horizon)
    fit_configs = [str(Path(c).resolve()) for c in fit_configs or []]
    for cfg in fit_configs:
        if not Path(cfg).is_file():
            raise OMGPTError(f"--fit-config {cfg}: no such file")
    out_dir = Path(out or ROOT / "results" / (name if scale == "cpu" else f"{name}-{scale}"))
    models_path = Path(models_dir or ROOT / "runs" / "experiments" / "models")
    runs = runs or exp.get("runs", 100)
    device = device or "cpu"  # rollouts of 100 runs are small; the scipy-based benchmarks want CPU tensors
    command = _command(name, scale, out, models_dir, runs if runs != exp.get("runs", 100) else None, horizon, fit_configs, seed, device)
    print(f"omgpt experiment {name} ({exp['title']}), scale {scale}: {len(exp['models'])} model(s), {len(exp['panels'])} panel(s)")
    start = time.perf_counter()
    if train_only:
        train_all(exp, models_path, fit_configs, jobs)
        return None
    # The report folder is built aside and replaces OUT only when complete; its temporary folder is
    # made before the training, so an unwritable OUT fails now and not hours later.
    with output_folder(out_dir, EXPERIMENT_FILES, "omgpt experiment") as folder:
        records = train_all(exp, models_path, fit_configs, jobs)
        kind = exp.get("figure", "curves")
        panels = []
        for panel in exp["panels"]:
            print(f"  evaluating {panel['title']} ({panel['task']} {panel['task_options'] or ''}, horizon {panel['horizon']}, {runs} runs)", flush=True)
            if kind == "demand-prediction":
                panels.append({"title": panel["title"], "task": panel["task"], "task_options": panel["task_options"], "horizon": panel["horizon"],
                               "model": panel["model"], "demand_prediction": demand_prediction_panel(panel, records, runs, seed, device)})
                continue
            numbers, histories = evaluate_panel(panel, records, runs, seed, device, rewards=kind == "advantage")
            numbers["figure_file"] = panel["figure_file"]
            if kind == "alg-star-match":
                numbers["alg_star_match"] = alg_star_match(panel, histories["omgpt"], seed)
            panels.append(numbers)
        result = {"name": name, "title": exp["title"], "source": exp.get("source", ""), "claim": exp.get("claim", ""),
                  "scale": scale, "runs": runs, "seed": seed, "command": command, "figure": kind,
                  "models": {n: {**r, "ckpt": _shown(Path(r["ckpt"]))} for n, r in records.items()}, "panels": panels, "seconds": round(time.perf_counter() - start, 1)}
        from analysis.experiment_figures import draw

        result["figures"] = draw(result, folder)
        write_json(result, folder / "experiment.json", indent=1)
        write_text(folder / "report.md", report(result))
    print(summary_lines(result))
    print(f"wrote {_shown(out_dir / 'report.md')}, {_shown(out_dir / 'experiment.json')} and {len(result['figures'])} figure(s)")
    return result


def _command(name, scale, out, models_dir, runs, horizon, fit_configs, seed, device) -> str:
    """The command line that reproduces this run (defaults left out)."""
    parts = ["omgpt experiment", name, "--scale", scale]
    parts += ["--out", str(out)] if out else []
    parts += ["--models-dir", str(models_dir)] if models_dir else []
    parts += ["--runs", str(runs)] if runs else []
    parts += ["--horizon", str(horizon)] if horizon else []
    parts += [f"--fit-config {_shown(Path(c))}" for c in fit_configs]
    parts += ["--seed", str(seed)] if seed else []
    parts += ["--device", device] if device != "cpu" else []
    return " ".join(parts)


# --------------------------------------------------------------------------------------------------
# Report.
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
    return "\n".join(f"  {p['title']}: {headline(p)}" for p in result["panels"])


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
    lines += ["## Models", "", "| model | steps | train s | best val regret | checkpoint |", "|---|---|---|---|---|"]
    for name, rec in result["models"].items():
        lines.append(f"| {name} | {rec.get('steps', '')} | {rec.get('train_seconds', '')} | {rec.get('best_val_regret', '')} | `{Path(rec['ckpt']).parent.parent.parent.name}` |")
    lines += ["", "Training commands (the model folders are content-addressed: the same command reuses the model):", ""]
    lines += [f"* {name}: `{rec['command']}`" for name, rec in result["models"].items()]
    return "\n".join(lines) + "\n"
