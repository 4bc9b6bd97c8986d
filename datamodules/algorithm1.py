"""Algorithm 1 of the paper (appendix B.2) in one place: what every epoch of a fit trains on.

One schedule, configured in one YAML block (``data.algorithm1``, layered field by field like any
setting), answers two questions for the epoch the datamodule builds a training loader for:

* :meth:`Algorithm1Schedule.horizon_at` -- the horizon ``T~`` its histories are truncated to (the horizon
  curriculum, :class:`HorizonCurriculum`; none: the whole horizon);
* :meth:`Algorithm1Schedule.mix_at` -- whether the epoch is in the mixed phase (:class:`MixedPhase`: the
  model's own rollouts mixed with data-policy histories), and how.

Each part is applied by a Lightning callback (``omgpt.callbacks.Curriculum``,
``omgpt.callbacks.SelfRolloutRefresh``), named once in ``configs/trainer/callback/`` and listed in a
config's ``trainer.callbacks``. A part configured without its callback, or a callback whose part is
null, is refused (:func:`applying_callbacks`), so a config whose callbacks list replaces another's cannot
drop a part of Algorithm 1 unnoticed.

Both parts are pure functions of the epoch, so a resumed fit trains on its epoch's stage and mix with no
state to restore but the weights the epoch's self-rollouts were played with (the datamodule keeps those).
:func:`play_self_rollouts` plays them: the one rollout loop, the model in eval mode, with its KV cache.

The paper's schedule (``configs/base.yaml``)::

    data:
      algorithm1:
        curriculum: {stage_epochs: 10, restart_epochs: [50], full_from_epoch: 100}
        mixed: {start_epoch: 50, rollouts: 640, kappa: 0.3333333333, batches_per_epoch: 50}

    trainer:
      callbacks:
        - trainer/callback/curriculum.yaml    # applies data.algorithm1.curriculum
        - trainer/callback/self_rollout.yaml  # applies data.algorithm1.mixed

A later config layers on it field by field; ``curriculum: null`` or ``mixed: null``, with its callback
left out of the list, turns a part off.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch

from collections.abc import Iterable

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.policies import make_policy
from omgpt.rollout import History, rollout
from omgpt.tasks import Task


@dataclass(frozen=True, kw_only=True)
class HorizonCurriculum:
    """Train on histories truncated to a horizon ``T~`` that rises to the target ``T`` in stages.

    The paper prints ``T~ = 20·(m%10+1)`` for iterations ``m ≤ 50`` and ``20·(m%10-4)`` for
    ``51 ≤ m ≤ 100``, which leave ``[20, 100]``; the authors' code pins the intent (docs/paper-gaps.md §6):
    ``T~ = 20·(((m-1)//10) % 5 + 1)`` for the 1-based iteration ``m`` up to the curriculum's end, then
    ``T``. With ``m = epoch + 1`` this is::

        T~(epoch) = min(start + step · ((epoch - p) // S), T)

    where ``S`` is ``stage_epochs`` and ``p`` the epoch at which the current phase began (0, then each
    of ``restart_epochs``); from ``full_from_epoch`` on, ``T~ = T``. By default ``start = step = ⌈T/5⌉``
    so any target is reached in five levels, as the paper's 20, 40, …, 100. The paper's own setting is
    ``stage_epochs=10, restart_epochs=[50], full_from_epoch=100`` with one epoch per iteration: epochs
    0-9 train at 20, 10-19 at 40, …, 40-49 at 100, 50-59 at 20 again, …, 90-99 at 100, then 100.

    Args:
        stage_epochs: epochs per stage ``S``.
        restart_epochs: epochs at which the curriculum starts again from ``start``.
        full_from_epoch: from this epoch on, the whole horizon; ``None``: the stages run on (capped at ``T``).
        start: the first stage's horizon; ``None``: ``⌈T/5⌉``.
        step: each stage's increase; ``None``: ``⌈T/5⌉``.
    """

    stage_epochs: int = 10
    restart_epochs: list[int] = field(default_factory=list)
    full_from_epoch: int | None = None
    start: int | None = None
    step: int | None = None

    def __post_init__(self):
        checks.number("data.algorithm1.curriculum.stage_epochs", self.stage_epochs, integer=True, low=1)
        for name in ("full_from_epoch", "start", "step"):
            checks.number(f"data.algorithm1.curriculum.{name}", getattr(self, name), integer=True, low=0, none=True)
        for epoch in self.restart_epochs:
            checks.number("data.algorithm1.curriculum.restart_epochs[]", epoch, integer=True, low=0)

    def horizon_at(self, epoch: int, target: int) -> int:
        """``T~`` for 0-based ``epoch`` when the target horizon is ``target``."""
        if self.full_from_epoch is not None and epoch >= self.full_from_epoch:
            return target
        phase_start = max([0] + [r for r in self.restart_epochs if r <= epoch])
        start = self.start or math.ceil(target / 5)
        step = self.step or math.ceil(target / 5)
        return max(1, min(target, start + step * ((epoch - phase_start) // self.stage_epochs)))


@dataclass(frozen=True, kw_only=True)
class MixedPhase:
    """From ``start_epoch`` on, every epoch trains on histories the current model played.

    The histories a model sees at test time are its own; histories of ``f~`` are not (their actions are
    near-optimal by construction, and leak the environment -- docs/recipe.md, "What makes in-context
    learning arrive"). So, as the paper's Algorithm 1, each epoch of the mixed phase rolls out the
    current model on ``rollouts`` freshly sampled environments per rank, mixes them with data-policy
    histories so that those make up ``kappa`` of the epoch's set, and trains ``batches_per_epoch``
    batches drawn from it (paper: ``start_epoch=50``, 10x64 rollouts, ``kappa=1/3``, 50 batches of 64).

    Args:
        start_epoch: first epoch of the mixed phase (0-based; the paper's ``M0 = 50`` iterations).
        rollouts: model-played histories per epoch and rank (paper: 640).
        kappa: share of data-policy histories in the epoch's training set (paper: 1/3).
        batches_per_epoch: batches per epoch in the mixed phase (paper: 50); ``None`` keeps
            ``data.batches_per_epoch``. (A cosine schedule sized by ``estimated_stepping_batches`` assumes
            ``data.batches_per_epoch`` for every epoch.)
        rollout_batch: environments rolled out together.
    """

    start_epoch: int = 50
    rollouts: int = 640
    kappa: float = 1 / 3
    batches_per_epoch: int | None = 50
    rollout_batch: int = 320

    def __post_init__(self):
        checks.number("data.algorithm1.mixed.start_epoch", self.start_epoch, integer=True, low=0)
        checks.number("data.algorithm1.mixed.rollouts", self.rollouts, integer=True, low=1)
        checks.number("data.algorithm1.mixed.kappa", self.kappa, low=0, high=1, high_open=True)
        checks.number("data.algorithm1.mixed.batches_per_epoch", self.batches_per_epoch, integer=True, low=1, none=True)
        checks.number("data.algorithm1.mixed.rollout_batch", self.rollout_batch, integer=True, low=1)


@dataclass(frozen=True, kw_only=True)
class Algorithm1Schedule:
    """The horizon curriculum and the mixed phase of a fit; either may be off (``None``: every epoch
    trains whole-horizon data-policy histories, Algorithm 1's early phase)."""

    curriculum: HorizonCurriculum | None = None
    mixed: MixedPhase | None = None

    @classmethod
    def of(cls, value: "Algorithm1Schedule | dict | None") -> "Algorithm1Schedule":
        """``value`` as a schedule: a dict (a checkpoint's hyper-parameters, a Python caller's) is read
        into one; ``None`` is no curriculum and no mixed phase."""
        if value is None or isinstance(value, cls):
            return value or cls()
        if not isinstance(value, dict) or set(value) - {"curriculum", "mixed"}:
            raise OMGPTError(f"data.algorithm1 takes curriculum and mixed, got {value!r}")
        parts = {}
        for name, part in (("curriculum", HorizonCurriculum), ("mixed", MixedPhase)):
            given = value.get(name)
            try:
                parts[name] = part(**given) if isinstance(given, dict) else given
            except TypeError as e:  # a setting the part does not have
                raise OMGPTError(f"data.algorithm1.{name}: {e}") from None
        return cls(**parts)

    def horizon_at(self, epoch: int, target: int) -> int:
        """The horizon epoch ``epoch`` trains on, for the target horizon ``target``."""
        return target if self.curriculum is None else self.curriculum.horizon_at(epoch, target)

    def mix_at(self, epoch: int) -> MixedPhase | None:
        """The mixed phase's settings if epoch ``epoch`` is in it, else ``None``."""
        return self.mixed if self.mixed is not None and epoch >= self.mixed.start_epoch else None


@torch.no_grad()
def play_self_rollouts(
    model: torch.nn.Module,
    task: Task,
    phase: MixedPhase,
    horizon: int,
    generator: torch.Generator,
    window: int | None = None,
    weights: dict[str, torch.Tensor] | None = None,
) -> list[History]:
    """``phase.rollouts`` histories of ``horizon`` steps played by ``model`` (in eval mode, its KV cache
    released after) on environments drawn from ``generator``, ``phase.rollout_batch`` at a time. With
    ``weights``, a copy of the model holding them plays instead (a run resumed mid-epoch replays the
    epoch's rollouts with the weights they were first played with); the model's mode is left as it was."""
    if weights is not None:
        model = copy.deepcopy(model)
        model.load_state_dict(weights)
    was_training = model.training
    policy = make_policy("omgpt", task, model=model, window=window)
    played = []
    for lo in range(0, phase.rollouts, phase.rollout_batch):
        envs = task.sample_envs(min(phase.rollout_batch, phase.rollouts - lo), generator)
        played.append(rollout(task, envs, policy, horizon, generator).to("cpu"))
    model.clear_cache()
    model.train(was_training)
    return played


# The callback that applies each part: its class (an ``algorithm1_part`` attribute names the part it
# applies) and the config that names it once.
PART_CALLBACKS = {
    "curriculum": ("omgpt.callbacks.Curriculum", "trainer/callback/curriculum.yaml"),
    "mixed": ("omgpt.callbacks.SelfRolloutRefresh", "trainer/callback/self_rollout.yaml"),
}


def applying_callbacks(schedule: Algorithm1Schedule, callbacks: Iterable) -> dict:
    """Part name -> the callback among ``callbacks`` that applies it, for each part ``schedule`` has.
    A part without its callback, a callback whose part is null, or one listed twice is one
    :class:`OMGPTError` line naming the fix."""
    applied = {}
    for part, (name, config) in PART_CALLBACKS.items():
        found = [c for c in callbacks if getattr(c, "algorithm1_part", None) == part]
        if len(found) > 1:
            raise OMGPTError(f"trainer.callbacks lists {name} {len(found)} times; list it once")
        if getattr(schedule, part) is not None and not found:
            raise OMGPTError(
                f"data.algorithm1.{part} is set but trainer.callbacks has no {name} to apply it: "
                f"list `- {config}` in the config's callbacks, or set data.algorithm1.{part}: null"
            )
        if found and getattr(schedule, part) is None:
            raise OMGPTError(
                f"trainer.callbacks has {name} but data.algorithm1.{part} is null: "
                f"remove the callback, or give data.algorithm1.{part} its settings"
            )
        if found:
            applied[part] = found[0]
    return applied
