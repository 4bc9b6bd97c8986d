"""The task registry: ``@register("name", **defaults)`` on a :class:`~omgpt.tasks.base.Task` subclass makes
``make_task("name", **options)`` build it, with its options checked and one step played before it is
handed out."""

from __future__ import annotations

import inspect
from typing import Callable

import torch

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.tasks.base import Task

TASKS: dict[str, Callable[..., Task]] = {}


def register(name: str, **defaults):
    """Class decorator: make ``make_task(name)`` build this class with ``defaults`` as base options."""

    def wrap(cls):
        if name in TASKS:
            raise ValueError(f"task {name!r} registered twice")
        cls.name = cls.name or name

        def factory(**options):
            return cls(**{**defaults, **options})

        factory.cls, factory.defaults = cls, defaults
        TASKS[name] = factory
        return cls

    return wrap


def make_task(name: str, **options) -> Task:
    """Build a registered task by name, e.g. ``make_task("newsvendor-censored", pool_size=4)``.

    Unknown names and options raise :class:`OMGPTError` naming what is available.
    """
    if name not in TASKS:
        raise OMGPTError(f"unknown task {name!r}; available: {', '.join(sorted(TASKS))}")
    factory = TASKS[name]
    allowed = {
        n
        for n, p in inspect.signature(factory.cls.__init__).parameters.items()
        if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    allowed |= {"pool_size", "pool_seed"}
    fixed = sorted(set(options) & set(factory.defaults))
    if fixed:
        raise OMGPTError(
            f"option {', '.join(map(repr, fixed))} is fixed by the task name {name!r}; pick the task variant instead"
        )
    bad = sorted(set(options) - allowed)
    if bad:
        raise OMGPTError(
            f"task {name!r} has no option {', '.join(map(repr, bad))}; options: {', '.join(sorted(allowed))}"
        )
    options = checks.options(factory.cls, options, f"task {name!r}")
    what = f"task {name!r} with options {options}"
    task = checks.built(lambda: factory(**options), what)
    # One step shows whether the options make a task that runs; an episode of one step needs no
    # longer planning horizon (queueing's DP would make a long one slow to try).
    check_playable(
        checks.built(lambda: factory(**{**options, "horizon": 1}), what) if "horizon" in options else task, what
    )
    task.name = name
    task._options = dict(options)
    return task


def check_playable(task: Task, what: str) -> None:
    """Play one step of two environments of ``task`` with uniformly random actions: an option its
    constructor lets through but its simulator cannot use (a negative size or variance) fails now, in
    one line naming ``what``, instead of inside a run -- or worse, quietly, as NaN numbers. (One step
    written out with the Task API: the rollout loop and the policies sit above the tasks.)"""
    g = torch.Generator().manual_seed(0)

    def one_step():
        envs = task.start(task.sample_envs(2, g), g)
        x = task.sample_context(envs, 0, g)
        a = task.project(task.sample_action(2, g).to(x.dtype), x)
        a_star = task.optimal_action(envs, x, 0)
        o = task.observe(envs, x, a, 0, g)
        regret = task.regret(envs, x, a, 0, a_star)
        task.step(envs, x, a, o, 0)
        return envs, {"contexts": x, "observations": o, "optimal_actions": a_star, "regrets": regret}

    envs, played = checks.built(one_step, what)
    checks.finite(what, **{f"environment {k}": v for k, v in envs.items()}, **played)


def make_episode_task(name: str, options: dict | None, horizon: int) -> Task:
    """:func:`make_task` for episodes of ``horizon`` steps: tasks whose prior or oracle depends on the
    episode length (queueing's DP, revenue's budget ``T·1``, the non-stationary change point) take a
    ``horizon`` option, which is set to ``horizon`` unless ``options`` fix it explicitly."""
    options = dict(options or {})
    factory = TASKS.get(name)
    if factory is not None and "horizon" in inspect.signature(factory.cls.__init__).parameters:
        options.setdefault("horizon", horizon)
    return make_task(name, **options)
