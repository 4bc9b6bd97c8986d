"""The online interface: a trained OMGPT, or any policy, deciding one step at a time, without Lightning.

A store orders each morning and sees the demand each night::

    agent = Agent.load("pretrained/newsvendor")   # or Agent.from_policy("erm", "newsvendor")
    agent.reset()                                 # a new episode (reset(batch=B): B of them at once)
    order = agent.act(context)                    # X_t: today's holding cost and demand features
    ...                                           # order it; at night the demand is known
    agent.observe(demand)                         # O_t; then act again tomorrow

An :class:`Agent` wraps a :class:`~omgpt.policies.Policy` and drives it exactly as
:func:`omgpt.rollout.rollout` does -- ``policy.act(t, x)``, the projection onto the action set
(:meth:`~omgpt.tasks.base.Task.project`), ``policy.observe(t, a, o)``, the policy's own generator, no
autograd graph, and on the CPU at most the policy's ``cpu_threads`` (OMGPT, ERM: one; a step of one
episode is far too small for a second thread, and two threads on a loaded 2-core machine made ERM's
100-day episode 12x slower: 20 s against 1.6 s) -- so on the same contexts and outcomes its actions are
the rollout's, bit for bit (tests/test_agent.py).
OMGPT (:class:`~omgpt.policies.gpt.ModelPolicy`) decides through its KV cache: a step feeds the network
only the new tokens; with a context window it rolls the window as in a rollout.

Inputs: ``act(context)`` and ``observe(outcome)`` take numbers, lists, NumPy arrays or tensors, for
a batch of ``B`` episodes as ``(B, dim)`` (``(B,)`` when ``dim`` is 1) or, when ``B = 1``, for the one
episode as ``(dim,)`` (a number when ``dim`` is 1). Tasks without a context (the bandits) take
``act()``. Every number must be finite and within :data:`omgpt.checks.MAGNITUDE` (1e8; float32 policies
overflow into NaN past ~1e19), and an outcome at least the task's ``outcome_low`` (a demand is never
negative): anything else is a one-line :class:`OMGPTError`, and so is an action that comes out non-finite.

Outputs, in the kind of the context: a tensor for a tensor (on its device), NumPy otherwise, shaped
as the context was -- ``(B, action_dim)`` or, for one episode, ``(action_dim,)``: the element of the
Gymnasium action space (:mod:`omgpt.envs`). Discrete tasks (the multi-armed bandit) return the action
index instead (``(B,)`` integers, or one integer). The action returned is the one the environment
plays, already projected onto the action set, and it is the one the policy then learns from; should
the environment play another, give it to ``observe(outcome, action=...)``.

Policies that read the hidden environment (``oracle``, ``noisy-oracle``), or a public part of the
episode's record that the contexts do not carry (``ada`` reads the revenue task's type table; the
``hindsight-linear`` yardstick reads the data window's future) need it: ``reset(envs=...)``, e.g. a
Gymnasium environment's ``env.unwrapped.envs``. Without it, their first read is a one-line
:class:`OMGPTError` saying which of the two it is. The data benchmarks (``saa``, ``gbm``, ...) read the
demand before a data set's window when given its ``envs``; without them (a practitioner's own series)
they start from the window's own days and the look-back summaries in the contexts.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from omgpt import checks, threads
from omgpt.errors import OMGPTError
from omgpt.model import load_model
from omgpt.policies import Policy, make_policy
from omgpt.tasks import Task, make_task
from omgpt.tasks.base import Envs


def _batch_of(envs: Any) -> int:
    """The number of episodes ``envs`` (``reset(envs=...)``) holds: every entry a tensor of that many rows."""
    if not isinstance(envs, dict) or not envs or not all(isinstance(v, Tensor) and v.dim() >= 1 for v in envs.values()):
        raise OMGPTError(
            f"envs must be a non-empty mapping of tensors with one row per episode (a Gymnasium environment's "
            f"env.unwrapped.envs), got {type(envs).__name__}"
        )
    sizes = {k: v.shape[0] for k, v in envs.items()}
    if len(set(sizes.values())) > 1:
        raise OMGPTError(
            f"envs holds {', '.join(f'{k}: {n}' for k, n in sizes.items())} rows: one row per episode in every entry"
        )
    return next(iter(sizes.values()))


@dataclass(frozen=True)
class _Form:
    """How an input came, so that the action goes back the same way."""

    tensor: bool  # a tensor (else NumPy)
    single: bool  # one episode's, without the batch dimension
    device: torch.device | None  # a tensor's device


class _Unseen(dict):
    """The environment an agent resets its policy with when it was given none: one empty ``(B, 0)``
    entry, from which the policy reads the batch size (all a learning policy may read), and a one-line
    error for anything else, saying what was read: a hidden parameter (the oracles' ``w``), or a part of
    the episode's record that is public but not in the contexts (a data window's ``row``, from which the
    data benchmarks read the demand before the window; revenue's type table)."""

    def __init__(self, policy: Policy, batch: int, device: torch.device):
        super().__init__({"": torch.empty(batch, 0, device=device)})
        self.policy = policy

    def __missing__(self, key: str):
        task = self.policy.task
        if not task.poolable:  # a data set's window hides nothing: it is the data
            what = f"the episode's record ({key!r}: which window of the data set it plays, and the demand before it)"
        elif key in task.observed_params:
            what = f"the episode's known parameters ({key!r}: public, but not all in the contexts)"
        else:
            what = f"the hidden environment ({key!r})"
        raise OMGPTError(
            f"policy {self.policy.name!r} reads {what}, which an agent is not given; give it with "
            f"agent.reset(envs=...), e.g. a Gymnasium environment's env.unwrapped.envs"
        )


class Agent:
    """Plays ``policy`` online: :meth:`reset`, then :meth:`act` and :meth:`observe` in turns.

    Args:
        policy: any policy (:func:`~omgpt.policies.make_policy`); usually built by :meth:`load` (OMGPT)
            or :meth:`from_policy` (a benchmark by name).
        horizon: the default episode length of :meth:`reset` (default: the task's). Policies size their
            state for it, and OMGPT without a context window cannot act past its ``max_steps``.
        device: where the policy computes (``cpu``, ``cuda``, ...).
        seed: seed of the policy's own randomness (a bandit's sampled arm, Thompson sampling's draws):
            the ``policy_generator`` of :func:`omgpt.rollout.rollout`. Episodes draw from it in turn;
            ``reset(seed=...)`` starts it again.
    """

    def __init__(self, policy: Policy, horizon: int | None = None, device: str | torch.device = "cpu", seed: int = 0):
        if not isinstance(policy, Policy):
            raise OMGPTError(
                f"Agent plays a policy (make_policy(...)), got {type(policy).__name__} {policy!r}; "
                f"Agent.from_policy(name, task) builds one by name, Agent.load(path) a trained OMGPT"
            )
        self.policy, self.task = policy, policy.task
        self.horizon = checks.number("horizon", self.task.horizon if horizon is None else horizon, integer=True, low=1)
        self.device = checks.device(str(device), "device")
        self.generator = torch.Generator(self.device).manual_seed(checks.seed("seed", seed))
        self.batch: int | None = None  # episodes being played; None: no episode (before reset, after close)
        self.t = 0  # the step the agent acts at next (0-based)
        self._horizon = self.horizon  # this episode's length
        self._played: tuple[Tensor, Tensor] | None = None  # (x_t, a_t) awaiting the outcome O_t

    # ---------------------------------------------------------------------------------------------
    # Building one.
    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        device: str | torch.device = "cpu",
        window: int | None = None,
        seed: int = 0,
        horizon: int | None = None,
        **options: Any,
    ) -> "Agent":
        """OMGPT from a checkpoint or a model folder (``pretrained/<name>``), via
        :func:`omgpt.model.load_model` (no Lightning).

        ``window``: the context window ``W`` (default: the one it was trained with, none for most
        models); ``horizon``: the default episode length (default: the horizon it was trained for);
        ``options``: :class:`~omgpt.policies.gpt.ModelPolicy`'s (``greedy``, ``use_cache``)."""
        dev = checks.device(str(device), "device")
        model, task, hparams = load_model(path, dev)
        window = hparams.get("window") if window is None else checks.number("window", window, integer=True, low=1)
        policy = make_policy("omgpt", task, model=model, window=window, **options)
        return cls(policy, hparams["horizon"] if horizon is None else horizon, dev, seed)

    @classmethod
    def from_policy(
        cls,
        name: str,
        task: str | Task,
        device: str | torch.device = "cpu",
        seed: int = 0,
        horizon: int | None = None,
        **options: Any,
    ) -> "Agent":
        """Any policy by its CLI name (``erm``, ``alg-star``, ``ucb``, ``ilse-tuned``, ...) for ``task``
        (a :class:`~omgpt.tasks.Task` or a task name, built with its default options); ``options`` are
        the policy's. ``horizon``: the default episode length (default: the task's), also the one a
        ``-tuned`` policy reads its constants for."""
        if name == "omgpt" and "model" not in options:
            raise OMGPTError(
                "policy 'omgpt' needs its network: Agent.load(path) loads a trained one (or give model=...)"
            )
        task = make_task(task) if isinstance(task, str) else task
        if not isinstance(task, Task):
            raise OMGPTError(f"task must be a task name or a Task, got {type(task).__name__} {task!r}")
        horizon = task.horizon if horizon is None else horizon
        return cls(make_policy(name, task, horizon=horizon, **options), horizon, device, seed)

    # ---------------------------------------------------------------------------------------------
    # Playing.
    def reset(
        self, batch: int = 1, horizon: int | None = None, seed: int | None = None, envs: Envs | None = None
    ) -> None:
        """Start ``batch`` new episodes of ``horizon`` steps (default: the agent's ``horizon``) and end
        the current ones. ``seed`` restarts the policy's generator. ``envs``: the hidden environment
        of the episodes, for the policies that read it (see the module docstring); it sets the batch."""
        self.close()
        if envs is not None:
            batch = _batch_of(envs)
        batch = checks.number("batch", batch, integer=True, low=1)
        horizon = self.horizon if horizon is None else checks.number("horizon", horizon, integer=True, low=1)
        if seed is not None:
            self.generator.manual_seed(checks.seed("seed", seed))
        try:
            with self._playing():
                self.policy.reset(
                    _Unseen(self.policy, batch, self.device) if envs is None else envs, horizon, self.generator
                )
        except OMGPTError:
            raise
        except ValueError as e:  # the policy's own refusal, e.g. a horizon past OMGPT's max_steps without a window
            raise OMGPTError(str(e)) from None
        self.batch, self._horizon, self.t, self._played = batch, horizon, 0, None

    def act(self, context: Any = None) -> Any:
        """The action for every episode given its context ``X_t`` (see the module docstring for the
        forms): the policy's decision, projected onto the action set as the rollout plays it."""
        if self.batch is None:
            raise OMGPTError("act() before reset(): call agent.reset() to start an episode")
        if self._played is not None:
            raise OMGPTError(
                f"act() twice at step {self.t + 1}: call agent.observe(outcome) with the last action's outcome first"
            )
        if self.t >= self._horizon:
            raise OMGPTError(
                f"the episode's {self._horizon} steps are played: call agent.reset() for a new one "
                f"(reset(horizon=...) for longer episodes)"
            )
        x, form = self._read(context, self.task.context_dim, "context")
        # as omgpt.rollout.rollout plays it; a policy's numerical failure (a singular least-squares system) is one line
        step = f"policy {self.policy.name!r} at step {self.t + 1}"
        with self._playing():
            a = checks.built(lambda: self.task.project(self.policy.act(self.t, x).to(x.dtype), x), step)
        if not bool(torch.isfinite(a).all()):  # never a NaN order: what the input bounds do not catch is refused here
            raise OMGPTError(f"{step} gave a non-finite action for these contexts and outcomes")
        self._played = (x, a)
        return self._write_action(a, form)

    def observe(self, outcome: Any, action: Any = None) -> None:
        """What the last action led to, ``O_t`` (demand, sales, the reward of an arm, ...), for every
        episode. ``action``: the action the environment played, if not the one :meth:`act` returned
        (projected onto the action set; an index for discrete tasks)."""
        if self._played is None:
            raise OMGPTError("observe() before act(): the agent observes the outcome of the action it just chose")
        o, _ = self._read(outcome, self.task.obs_dim, "outcome", self.task.outcome_low)
        x, a = self._played
        if action is not None:
            a = self.task.project(self._read_action(action), x)
        with self._playing():
            checks.built(lambda: self.policy.observe(self.t, a, o), f"policy {self.policy.name!r} at step {self.t + 1}")
        self.t, self._played = self.t + 1, None

    def close(self) -> None:
        """End the current episodes: the policy releases what it holds (OMGPT's KV cache)."""
        if self.batch is not None:
            self.policy.close()
        self.batch, self._played = None, None

    @contextmanager
    def _playing(self):
        """The policy's work, as :func:`omgpt.rollout.rollout` plays it: no autograd graph and, on the
        CPU, at most the policy's ``cpu_threads`` (the caller's thread count restored after)."""
        limit = getattr(self.policy, "cpu_threads", None) if self.device.type == "cpu" else None
        with torch.no_grad(), threads.at_most(limit):
            yield

    # ---------------------------------------------------------------------------------------------
    # Conversions.
    def _read(self, value: Any, dim: int, what: str, low: float = -math.inf) -> tuple[Tensor, _Form]:
        """``value`` as a ``(B, dim)`` tensor on the agent's device, and the form it came in; its numbers
        finite, within :data:`omgpt.checks.MAGNITUDE` and ``>= low`` (:func:`omgpt.checks.inputs`)."""
        b = self.batch
        if value is None:
            if dim:
                raise OMGPTError(f"the {what} is missing: {dim} number(s) per episode")
            return torch.zeros(b, 0, device=self.device), _Form(False, b == 1, None)
        is_tensor = isinstance(value, Tensor)
        try:
            t = value.detach() if is_tensor else torch.as_tensor(np.asarray(value, dtype=np.float32))
        except (TypeError, ValueError):
            raise OMGPTError(f"the {what} must be numbers, got {type(value).__name__}") from None
        shape = tuple(t.shape)
        if shape == (b, dim) or (dim == 1 and shape == (b,)):
            single = False
        elif b == 1 and (shape == (dim,) or (dim == 1 and shape == ())):
            single = True
        else:
            one = f", or ({dim},) for the one episode" if b == 1 else ""
            raise OMGPTError(f"the {what} has shape {shape}: expected ({b}, {dim}) for {b} episode(s){one}")
        t = checks.inputs(what, t.to(self.device, torch.get_default_dtype()).reshape(b, dim), low)
        return t, _Form(is_tensor, single, value.device if is_tensor else None)

    def _read_action(self, action: Any) -> Tensor:
        """An action as the environment played it -> ``(B, action_dim)`` (discrete: indices -> one-hot)."""
        if not self.task.discrete:
            return self._read(action, self.task.action_dim, "action")[0]
        index = torch.as_tensor(np.asarray(action.cpu() if isinstance(action, Tensor) else action)).reshape(-1)
        n = self.task.action_dim
        if index.shape != (self.batch,) or index.is_floating_point() or not bool(((index >= 0) & (index < n)).all()):
            raise OMGPTError(f"the action must be {self.batch} action index(es) in 0..{n - 1}, got {action!r}")
        return F.one_hot(index.long(), n).to(self.device, torch.get_default_dtype())

    def _write_action(self, a: Tensor, form: _Form) -> Any:
        out = a.argmax(-1) if self.task.discrete else a  # (B,) indices or (B, action_dim)
        if form.single:
            out = out[0]
        if form.tensor:
            return out.to(form.device)
        out = out.cpu().numpy()
        return out[()] if out.ndim == 0 else out  # one index: a NumPy integer
