"""The policy interface every decision maker shares, and the policy registry.

A policy is anything with

* ``reset(envs, horizon, generator)`` -- start a batch of episodes. Only oracles may look at ``envs``;
  learning policies use it for the batch size and device and nothing else.
* ``act(t, x) -> actions`` -- the action for every environment at step ``t`` (0-based) given the
  context ``x`` ``(B, context_dim)``; returns ``(B, action_dim)``. The rollout projects onto ``A``.
* ``observe(t, actions, observations)`` -- what was played and what was seen.
* ``close()`` -- the episodes are over: release what they held (OMGPT's KV cache). The rollout calls
  it whether or not the episodes finished.

so one rollout loop (:func:`omgpt.rollout.rollout`) draws every curve: OMGPT, oracles, benchmarks.
"""

from __future__ import annotations

import inspect
from typing import Callable, ClassVar

import torch
from torch import Tensor

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.tasks.base import Envs, Task


class Policy:
    """Base class with the interface above.

    ``tunable`` maps a benchmark's free constants (constructor arguments) to the grid that
    ``omgpt tune`` searches on validation environments; every policy that has one also gets a
    ``<name>-tuned`` variant playing the chosen values (:mod:`omgpt.policies.tuned`)."""

    name: str = ""
    tunable: ClassVar[dict[str, tuple]] = {}
    # How ``omgpt tune`` widens the grid past an end its winner sits on: "cross" tries the new value with
    # every value of the other constants, "line" with the winner's only (one point per new value).
    widen: ClassVar[str] = "cross"
    # At most this many CPU intra-op threads while it plays (omgpt.rollout, omgpt.threads.at_most): for
    # a policy whose per-step work is too small a parallel region for a second thread; None: as configured.
    cpu_threads: int | None = None

    def __init__(self, task: Task):
        self.task = task

    def reset(self, envs: Envs, horizon: int, generator: torch.Generator) -> None:
        self.envs, self.horizon, self.generator = envs, horizon, generator
        self.batch = next(iter(envs.values())).shape[0]
        self.device = generator.device

    def act(self, t: int, x: Tensor) -> Tensor:
        raise NotImplementedError

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        pass

    def close(self) -> None:
        pass


class HistoryPolicy(Policy):
    """A policy that keeps the whole history it has seen in preallocated ``(B, T, ·)`` buffers."""

    def reset(self, envs: Envs, horizon: int, generator: torch.Generator) -> None:
        super().reset(envs, horizon, generator)
        task, b = self.task, self.batch
        self.xs = torch.zeros(b, horizon, task.context_dim, device=self.device)
        self.actions = torch.zeros(b, horizon, task.action_dim, device=self.device)
        self.observations = torch.zeros(b, horizon, task.obs_dim, device=self.device)

    def act(self, t: int, x: Tensor) -> Tensor:
        self.xs[:, t] = x
        return self.decide(t, x)

    def decide(self, t: int, x: Tensor) -> Tensor:
        """The action at step ``t``; ``self.xs[:, :t]``, ``self.actions[:, :t]``, ``self.observations[:, :t]`` hold the past."""
        raise NotImplementedError

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        self.actions[:, t], self.observations[:, t] = actions, observations


# --------------------------------------------------------------------------------------------------
# Registry: name -> (factory(task, **options), which tasks it applies to).
POLICIES: dict[str, tuple[Callable[..., Policy], Callable[[Task], bool]]] = {}


def register_policy(name: str, tasks: tuple[type, ...] | None = None, applies: Callable[[Task], bool] | None = None):
    """Class decorator: ``make_policy(name, task)`` builds this class. It applies to the task classes
    ``tasks`` (a benchmark written for one problem), to the tasks for which ``applies(task)`` holds
    (``alg-star``: those with a likelihood), or to every task."""
    if applies is None:
        applies = (lambda task: True) if tasks is None else (lambda task: isinstance(task, tasks))

    def wrap(cls):
        cls.name = name
        POLICIES[name] = (cls, applies)
        return cls

    return wrap


def make_policy(name: str, task: Task, horizon: int | None = None, **options) -> Policy:
    """Build a policy by its CLI name for ``task`` (``omgpt`` needs ``model=``). ``horizon``: the
    episode length, given to the policies that need it before the first episode (a ``-tuned`` variant
    reads the constants tuned for it) and ignored by the others."""
    if name not in POLICIES:
        raise OMGPTError(f"unknown policy {name!r}; available: {', '.join(sorted(POLICIES))}")
    cls, applies = POLICIES[name]
    if not applies(task):
        raise OMGPTError(
            f"policy {name!r} does not apply to task {task.name!r}; policies for it: {', '.join(policies_for(task))}"
        )
    if horizon is not None and "horizon" in inspect.signature(cls).parameters:
        options = {**options, "horizon": horizon}
    options = checks.options(cls, options, f"policy {name!r}")
    return checks.built(lambda: cls(task, **options), f"policy {name!r}")


def policies_for(task: Task) -> list[str]:
    """Names of every policy that applies to ``task``."""
    return sorted(n for n, (_, applies) in POLICIES.items() if applies(task))
