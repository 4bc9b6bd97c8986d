"""``omgpt experiment``'s config language: ``configs/experiments/NAME.yaml`` resolved at a scale.

An experiment names the models it trains and the panels it draws; any mapping may hold ``cpu:`` /
``paper:`` keys whose contents override its siblings at that scale.
"""
from __future__ import annotations

import yaml

from omgpt.errors import OMGPTError
from omgpt.resources import CONFIGS

EXPERIMENTS = CONFIGS / "experiments"
SCALES = {"cpu": CONFIGS / "scale" / "cpu.yaml", "paper": CONFIGS / "scale" / "paper.yaml"}
FIGURES = ("curves", "advantage", "alg-star-match", "demand-prediction")


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
