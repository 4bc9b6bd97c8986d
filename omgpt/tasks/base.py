"""The Task API: a decision problem is a prior over environments plus a batched simulator.

A task owns everything that is specific to one decision problem -- the prior, the simulator, the
optimal action, expected rewards and regret, the loss, and how its numbers should be scaled before
they reach the network. All methods work on a batch of ``B`` environments at once (no Python loop over
environments) and on whatever device the tensors live on.

Environments are a plain ``dict[str, Tensor]`` whose tensors have the batch as their first dimension.
Every draw of randomness goes through an explicit ``torch.Generator`` so a history is a pure function of
its seeds: that is what lets DDP ranks, DataLoader workers and evaluations never repeat each other.

Adding a task = one file in this folder that subclasses :class:`Task` and decorates it with
``@register("name")``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, ClassVar

import torch
from torch import Tensor

from omgpt import checks
from omgpt.errors import OMGPTError

Envs = dict[str, Tensor]


@dataclass(frozen=True)
class Scaling:
    """Affine maps that bring features and actions to roughly zero mean, unit scale.

    The model sees ``(feature - feature_loc) / feature_scale`` and predicts actions in units of
    ``(action - action_loc) / action_scale``. Raw newsvendor demands live in ``[0, 45]``; feeding them
    unscaled slows down in-context learning markedly.
    """

    feature_loc: tuple[float, ...]
    feature_scale: tuple[float, ...]
    action_loc: tuple[float, ...]
    action_scale: tuple[float, ...]


class Task:
    """Base class of every decision problem.

    Subclasses set the class attributes and implement the ``_sample_prior``, ``sample_context``,
    ``observe``, ``optimal_action`` and ``expected_reward`` methods. Everything else (finite pools,
    regret, projection) is shared.

    Args:
        pool_size: if given, draw this many environments once (with ``pool_seed``) and make the prior
            uniform over them -- the paper's "finite pool". Only the hidden parameters are pooled:
            contexts, and the parameters in :attr:`observed_params`, are drawn as in the full prior.
        pool_seed: seed of the pool draw; fixed so that training and evaluation see the same pool.
    """

    name: ClassVar[str] = ""
    loss: ClassVar[str] = "mse"  # "mse" | "l1" | "ce": the pre-training loss (paper §3, Prop. 2)
    context_dim: int
    obs_dim: int
    action_dim: int  # action coordinates (continuous) or number of actions (discrete, one-hot tokens)
    action_low: float  # the action box A = [action_low, action_high]^action_dim (continuous tasks)
    action_high: float
    discrete: ClassVar[bool] = False  # actions are one-hot vectors; the model's read-out is logits
    horizon: ClassVar[int] = 100  # the paper's default horizon for this task
    benchmarks: ClassVar[tuple[str, ...]] = ()  # policy names of the paper's benchmarks for this task
    # Environment entries the decision maker is shown in its context (the newsvendor's holding cost,
    # queueing's cost, revenue management's product catalogue). A finite pool fixes only the hidden
    # parameters; these are redrawn from the full prior every episode (SPEC §6), otherwise the context
    # would identify the pool member at t = 1 while Alg* never uses it.
    observed_params: ClassVar[tuple[str, ...]] = ()

    def __init__(self, pool_size: int | None = None, pool_seed: int = 1234):
        if pool_size is not None and pool_size < 1:
            raise OMGPTError(f"pool_size must be a positive integer, got {pool_size}")
        self.pool_size = pool_size
        self.pool_seed = pool_seed
        self._options: dict = {}  # filled by make_task: what the task was built with
        self._pool: Envs | None = None
        if pool_size is not None:
            g = torch.Generator().manual_seed(pool_seed)
            self._pool = self._sample_prior(pool_size, g)

    # ----------------------------------------------------------------------------------------------
    # What a task file implements.
    def _sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        """Draw ``n`` environments from the (continuous) prior, on the generator's device."""
        raise NotImplementedError

    def sample_context(self, envs: Envs, t: int, generator: torch.Generator) -> Tensor:
        """Context ``X_t`` for every environment, shape ``(B, context_dim)``; ``t`` is 0-based."""
        raise NotImplementedError

    def observe(self, envs: Envs, x: Tensor, a: Tensor, t: int, generator: torch.Generator) -> Tensor:
        """Observation ``O_t`` after playing ``a`` (shape ``(B, action_dim)``), shape ``(B, obs_dim)``."""
        raise NotImplementedError

    def optimal_action(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        """``a*_t = argmax_{a in A} r(X_t, a)`` given the hidden environment, shape ``(B, action_dim)``."""
        raise NotImplementedError

    def expected_reward(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """``r(X_t, a)``: the reward of ``a`` in expectation over the observation noise, shape ``(B,)``."""
        raise NotImplementedError

    def scaling(self) -> Scaling:
        """How to normalise the model's inputs and outputs (see :class:`Scaling`)."""
        d = self.obs_dim + self.context_dim
        return Scaling((0.0,) * d, (1.0,) * d, (0.0,) * self.action_dim, (1.0,) * self.action_dim)

    # ----------------------------------------------------------------------------------------------
    # Hooks with defaults: stateful tasks and discrete actions override them.
    def start(self, envs: Envs, generator: torch.Generator) -> Envs:
        """A fresh episode's environment dict: a copy of ``envs`` plus any initial state (inventory,
        queue length, budget). The copy keeps the caller's ``envs`` (shared by every policy of an
        evaluation) untouched."""
        return dict(envs)

    def step(self, envs: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> None:
        """Advance the episode's state after step ``t`` by replacing entries of ``envs`` (the dict from
        :meth:`start`; never modify its tensors in place). Stateless tasks do nothing."""

    def perturb(self, a: Tensor, noisy: Tensor, generator: torch.Generator, scale: float = 1.0) -> Tensor:
        """The noisy oracle's ``a + ε'`` where ``noisy (B, 1)`` is true: ``ε' ~ U[-scale, scale]^d``
        (paper appendix B.3; discrete tasks shift the index by ``U{-2,-1,1,2}`` instead)."""
        eps = scale * (2 * torch.rand(a.shape, generator=generator, device=a.device) - 1)
        return a + noisy * eps

    def sample_action(self, n: int, generator: torch.Generator) -> Tensor:
        """A uniformly random action per environment, ``(n, action_dim)`` (the ``random`` policy):
        uniform on the box ``A``; discrete tasks override with a uniform one-hot."""
        u = torch.rand(n, self.action_dim, generator=generator, device=generator.device)
        return self.action_low + (self.action_high - self.action_low) * u

    def action_from_output(self, output: Tensor, generator: torch.Generator | None = None, greedy: bool = False) -> Tensor:
        """Turn the model's read-out into an action: the identity for continuous tasks (discrete
        tasks sample from the softmax, or take the argmax when ``greedy``)."""
        return output

    # ----------------------------------------------------------------------------------------------
    # Shared machinery.
    @property
    def feature_dim(self) -> int:
        """Size of a feature token ``(O_{t-1}, X_t)``."""
        return self.obs_dim + self.context_dim

    def sample_envs(self, n: int, generator: torch.Generator) -> Envs:
        """Draw ``n`` environments from the prior: with a pool, its hidden parameters uniformly from
        the pool and the :attr:`observed_params` fresh from the full prior."""
        if self._pool is None:
            return self._sample_prior(n, generator)
        device = generator.device
        idx = torch.randint(self.pool_size, (n,), generator=generator, device=device)
        envs = {k: v.to(device)[idx] for k, v in self._pool.items()}
        if self.observed_params:
            fresh = self._sample_prior(n, generator)
            envs.update({k: fresh[k] for k in self.observed_params})
        return envs

    def project(self, a: Tensor, x: Tensor | None = None) -> Tensor:
        """Project actions onto the action set ``A`` (a box by default)."""
        return a.clamp(self.action_low, self.action_high)

    def mean_action(self, a: Tensor, x: Tensor | None = None) -> Tensor:
        """The action to play for an average ``a`` of optimal actions (``alg-star``'s posterior
        averaging): its projection onto ``A``; tasks whose optimal actions lie on the boundary of ``A``
        (the linear bandit's unit sphere) put it back there."""
        return self.project(a, x)

    def regret(self, envs: Envs, x: Tensor, a: Tensor, t: int, a_star: Tensor | None = None) -> Tensor:
        """Per-step pseudo-regret ``r(X_t, a*_t) - r(X_t, a_t)``, shape ``(B,)``. ``a_star``: the
        step's optimal action when the caller already has it (the rollout does)."""
        a_star = self.optimal_action(envs, x, t) if a_star is None else a_star
        best = self.expected_reward(envs, x, a_star, t)
        return best - self.expected_reward(envs, x, a, t)

    def suboptimality(self, envs: Envs, x: Tensor, a: Tensor, t: int, a_star: Tensor | None = None) -> Tensor:
        """Action suboptimality ``|a*_t - a_t|`` (Euclidean norm for vector actions), shape ``(B,)``."""
        a_star = self.optimal_action(envs, x, t) if a_star is None else a_star
        return torch.linalg.vector_norm(a - a_star, dim=-1)

    def options(self) -> dict:
        """The constructor options this task was built with (saved in checkpoints)."""
        return dict(self._options)


class DemandTypes:
    """For tasks whose demand is linear, square, or a hidden per-environment mixture of the two
    (``demand_types`` = ``"linear"`` / ``"square"`` / ``"mixed"``; pricing and newsvendor)."""

    demand_types: str

    def is_square(self, envs: Envs) -> Tensor | bool:
        """Which environments have square demand: ``envs["square"]`` ``(B,)`` in the mixed prior, else
        the task's fixed type (a Python bool)."""
        if "square" in envs:
            return envs["square"]
        if self.demand_types == "mixed":
            raise KeyError("mixed demand types need envs['square']")
        return self.demand_types == "square"


# --------------------------------------------------------------------------------------------------
# Registry.
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
    allowed = {n for n, p in inspect.signature(factory.cls.__init__).parameters.items() if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    allowed |= {"pool_size", "pool_seed"}
    fixed = sorted(set(options) & set(factory.defaults))
    if fixed:
        raise OMGPTError(f"option {', '.join(map(repr, fixed))} is fixed by the task name {name!r}; pick the task variant instead")
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
    checks.playable(checks.built(lambda: factory(**{**options, "horizon": 1}), what) if "horizon" in options else task, what)
    task.name = name
    task._options = dict(options)
    return task


def make_episode_task(name: str, options: dict | None, horizon: int) -> Task:
    """:func:`make_task` for episodes of ``horizon`` steps: tasks whose prior or oracle depends on the
    episode length (queueing's DP, revenue's budget ``T·1``, the non-stationary change point) take a
    ``horizon`` option, which is set to ``horizon`` unless ``options`` fix it explicitly."""
    options = dict(options or {})
    factory = TASKS.get(name)
    if factory is not None and "horizon" in inspect.signature(factory.cls.__init__).parameters:
        options.setdefault("horizon", horizon)
    return make_task(name, **options)


def check_noise_std(noise_std: float) -> float:
    """The Gaussian tasks' noise option: a standard deviation ``σ ≥ 0`` (SPEC §6: the paper's
    ``N(·, 0.2)`` is ``σ = 0.2``, as in the authors' code), finite."""
    value = float(noise_std)
    if not (value >= 0 and value < float("inf")):
        raise OMGPTError(f"noise_std must be a finite non-negative standard deviation, got {noise_std}")
    return value


def uniform(n: int, dims: tuple[int, ...], low: float, high: float, generator: torch.Generator) -> Tensor:
    """``U[low, high]`` samples of shape ``(n, *dims)`` on the generator's device."""
    return low + (high - low) * torch.rand((n, *dims), generator=generator, device=generator.device)
