"""The Task API: a decision problem is a prior over environments plus a batched simulator.

A task owns everything that is specific to one decision problem -- the prior, the simulator, the
optimal action, expected rewards and regret, the loss, how its numbers should be scaled before they
reach the network, and its model of the world as a Bayesian decision maker needs it: which parameters
are hidden and which are shown in the context, the likelihood of an observation under candidate
environments, the prior density, and the mean observation. Policies (``alg-star``), analysis and
callbacks ask the task; none of them knows a task by its class. All methods work on a batch of ``B`` environments at once (no Python loop over
environments) and on whatever device the tensors live on.

Environments are a plain ``dict[str, Tensor]`` whose tensors have the batch as their first dimension.
Every draw of randomness goes through an explicit ``torch.Generator`` so a history is a pure function of
its seeds: that is what lets DDP ranks, DataLoader workers and evaluations never repeat each other.

Adding a task = one file in this folder that subclasses :class:`Task` and decorates it with
``@register("name")`` (:mod:`omgpt.tasks.registry`). The mix-ins several tasks share (Gaussian noise,
demand types) are in :mod:`omgpt.tasks.mixins`, the prior and likelihood helpers in
:mod:`omgpt.tasks.densities`.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable, ClassVar, NamedTuple

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


class HiddenType(NamedTuple):
    """A hidden categorical environment parameter: ``envs[key]`` holds class indices (or a bool for
    two classes) ``(B,)``; ``name`` says what it is, ``classes`` names its values."""

    key: str
    name: str
    classes: tuple[str, ...]


class Task:
    """Base class of every decision problem.

    Subclasses set the class attributes and implement the ``sample_prior``, ``sample_context``,
    ``observe``, ``optimal_action`` and ``expected_reward`` methods. Everything else (finite pools,
    regret, projection) is shared. A task that also implements :meth:`log_likelihood` (and, for
    particle rejuvenation, :meth:`log_prior` with :attr:`moved_params`) gets the posterior oracle
    ``alg-star`` for free: :attr:`has_likelihood` and the other capability flags follow the methods
    a task implements.

    Args:
        pool_size: if given, draw this many environments once (with ``pool_seed``) and make the prior
            uniform over them -- the paper's "finite pool". Only the hidden parameters are pooled:
            contexts, and the parameters in :attr:`observed_params`, are drawn as in the full prior.
        pool_seed: seed of the pool draw; fixed so that training and evaluation see the same pool.
    """

    name: ClassVar[str] = ""
    # "mse" | "l1" | "ce": the pre-training loss (paper §3, Prop. 2), applied by :meth:`action_loss`;
    # it also fixes the Bayes decision Alg* takes (posterior mean, median, or a posterior draw).
    loss: ClassVar[str] = "mse"
    # What OMGPT is pre-trained to predict (OMGPTModule's ``target``): "optimal_action" (the paper's:
    # ``a*`` under :attr:`loss`) or "cost" (the task's own cost of the predicted action against the
    # realised outcome, :meth:`outcome_cost`: learning without an oracle).
    default_target: ClassVar[str] = "optimal_action"
    # False where :meth:`optimal_action` is no oracle's decision but a hindsight one (real data: the
    # realised demand), so imitating it is no pre-training target.
    has_optimal_action: ClassVar[bool] = True
    context_dim: int
    obs_dim: int
    action_dim: int  # action coordinates (continuous) or number of actions (discrete, one-hot tokens)
    action_low: float  # the action box A = [action_low, action_high]^action_dim (continuous tasks)
    action_high: float
    discrete: ClassVar[bool] = False  # actions are one-hot vectors; the model's read-out is logits
    # The smallest outcome the task can produce (a demand is never negative): an agent refuses an
    # outcome below it, which no environment of the task would have given.
    outcome_low: ClassVar[float] = -math.inf
    default_horizon: ClassVar[int] = 100  # the paper's T for this task (an instance's is :attr:`horizon`)
    benchmarks: ClassVar[tuple[str, ...]] = ()  # policy names of the paper's benchmarks for this task
    # Environment entries the decision maker is shown in its context (the newsvendor's holding cost,
    # queueing's cost, revenue management's product catalogue). A finite pool fixes only the hidden
    # parameters; these are redrawn from the full prior every episode (docs/paper-gaps.md §6), otherwise the context
    # would identify the pool member at t = 1 while Alg* never uses it.
    observed_params: ClassVar[tuple[str, ...]] = ()
    # Whether a finite pool (``pool_size``) applies: not to a data set's windows, already a finite set
    # whose contexts are the windows' own (they identify the window by design).
    poolable: ClassVar[bool] = True
    # The continuous hidden parameters a particle rejuvenation move perturbs (see :meth:`log_prior`);
    # discrete hidden parameters (a demand type, a change point) are only resampled, never moved.
    moved_params: ClassVar[tuple[str, ...]] = ()
    # The moved parameters are one unit vector (the linear bandit's ``w``): the random walk is then
    # isotropic and each proposal is put back on the sphere, which keeps the walk symmetric.
    moved_on_sphere: ClassVar[bool] = False
    # Leading context columns that hold the episode's state (the non-perishable inventory, the queue
    # length) rather than a fresh draw: analysis that swaps contexts keeps these from the episode.
    state_dims: ClassVar[int] = 0
    # A hidden categorical parameter that splits the prior into kinds of environment (the mixed prior's
    # demand type); probes classify it and t-SNE colours by it.
    hidden_type: HiddenType | None = None
    # What the task can do beyond the five methods every task implements. Each flag is set for every
    # subclass from whether it implements the method (:meth:`__init_subclass__`), so a task file never
    # states it twice; a task whose instances differ states its own (the censored newsvendor has no
    # outcome cost). Callers read the flag, never the method's owner.
    has_likelihood: ClassVar[bool] = False  # log_likelihood: the posterior oracle alg-star
    has_likelihood_stats: ClassVar[bool] = False  # likelihood_stats: alg-star's moves without replaying the history
    has_outcome_cost: ClassVar[bool] = False  # outcome_cost: training with target: cost (no oracle)
    has_mean_observation: ClassVar[bool] = False  # mean_observation: the observation head's prediction target
    # action_values: each action of a finite grid valued in a known environment (target: bayes_action)
    has_action_values: ClassVar[bool] = False
    CAPABILITIES: ClassVar[dict[str, str]] = {
        "has_likelihood": "log_likelihood",
        "has_likelihood_stats": "likelihood_stats",
        "has_outcome_cost": "outcome_cost",
        "has_mean_observation": "mean_observation",
        "has_action_values": "action_values",
    }

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "horizon" in vars(cls):
            raise TypeError(
                f"{cls.__name__}: set default_horizon (the paper's T for the task); horizon is an instance's episode horizon"
            )
        for flag, method in Task.CAPABILITIES.items():
            # (a flag this class states, or a property a base class states it by, stays as stated)
            if flag not in vars(cls) and not isinstance(inspect.getattr_static(cls, flag), property):
                setattr(cls, flag, getattr(cls, method) is not getattr(Task, method))

    @property
    def horizon(self) -> int:
        """The episode horizon this task was made for: its ``horizon`` option where it takes one (the
        change-point prior, queueing's DP, revenue's budget depend on it), else :attr:`default_horizon`."""
        return self.__dict__.get("_horizon", self.default_horizon)

    @horizon.setter
    def horizon(self, value: int) -> None:
        self._horizon = value

    def __init__(self, pool_size: int | None = None, pool_seed: int = 1234):
        if pool_size is not None:
            pool_size = checks.size("pool_size", pool_size)
        if pool_size is not None and not self.poolable:
            raise OMGPTError(
                f"task {self.name!r} draws from a data set's windows, already a finite set: pool_size does not apply"
            )
        self.pool_size = pool_size
        self.pool_seed = pool_seed
        self._options: dict = {}  # filled by make_task: what the task was built with
        self._pool: Envs | None = None
        if pool_size is not None:
            g = torch.Generator().manual_seed(pool_seed)
            self._pool = self.sample_prior(pool_size, g)

    # ----------------------------------------------------------------------------------------------
    # What a task file implements.
    def sample_prior(self, n: int, generator: torch.Generator) -> Envs:
        """Draw ``n`` environments from the full (continuous) prior, on the generator's device
        (:meth:`sample_envs` draws from the task's prior, which a finite pool replaces)."""
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

    def grid_actions(self, device=None) -> Tensor:
        """The finite set of actions :meth:`action_values` values, ``(G, action_dim)``."""
        raise NotImplementedError

    def action_values(self, envs: Envs, x: Tensor, t: int) -> Tensor:
        """``Q_t(X_t, a)`` of every action of :meth:`grid_actions` in each environment of ``envs``,
        ``(B, G)``: the expected reward from step ``t`` on when ``a`` is played now and the environment's
        optimal policy after it (the greedy action of this Q is :meth:`optimal_action`). Averaged over a
        posterior, its argmax is the decision of ``alg-star``'s ``value`` rule and the target of
        ``model.target: bayes_action``."""
        raise NotImplementedError

    def scaling(self) -> Scaling:
        """How to normalise the model's inputs and outputs (see :class:`Scaling`)."""
        d = self.obs_dim + self.context_dim
        return Scaling((0.0,) * d, (1.0,) * d, (0.0,) * self.action_dim, (1.0,) * self.action_dim)

    # ----------------------------------------------------------------------------------------------
    # The task's model of the world, for decision makers that reason about the hidden environment
    # (``alg-star``) and for analysis. Defaults say "not available".
    def log_likelihood(self, candidates: Envs, x: Tensor, a: Tensor, o: Tensor, t: int) -> Tensor:
        """``log P(O_t = o | γ, X_t = x, a_t = a)`` up to a constant shared by all candidates, ``(M,)``.

        ``candidates`` holds ``M`` environments and ``x, a, o`` the matching ``M`` rows of context,
        action and observation. ``-inf`` rules a candidate out. Tasks without one (queueing, revenue
        management) have no ``alg-star``."""
        raise NotImplementedError(f"task {self.name!r} has no observation likelihood")

    # Running statistics of an episode's history from which the log-likelihood of the whole history
    # follows without replaying it step by step (what keeps alg-star's rejuvenation moves cheap).
    def likelihood_stats(self, stats: Envs | None, x: Tensor, a: Tensor, o: Tensor, t: int, used: Tensor) -> Envs:
        """Fold step ``t``'s observation of each of ``B`` episodes into their running statistics:
        ``stats`` from the previous step (``None`` at the first), context, action and observation
        ``(B, ·)``, and ``used`` ``(B,)`` bool, false where the episode ignores this observation
        (:meth:`likelihood_from_stats` must then be as if the step was never seen). Returns the new
        statistics, a dict of tensors with the episodes as first dimension (never modified in place).
        Tasks without statistics (the default) raise ``NotImplementedError``."""
        raise NotImplementedError(f"task {self.name!r} has no likelihood statistics")

    def likelihood_from_stats(self, candidates: Envs, stats: Envs) -> Tensor:
        """``Σ_s log P(O_s | γ, X_s, a_s)`` over the used steps folded into ``stats`` (``b`` episodes),
        for ``candidates`` with ``b · N`` rows, episode ``i``'s in rows ``i N .. (i+1) N - 1``, ``(b N,)``
        float64; equal, up to float rounding, to the sum of :meth:`log_likelihood` over those steps."""
        raise NotImplementedError(f"task {self.name!r} has no likelihood statistics")

    def log_prior(self, candidates: Envs) -> Tensor:
        """Log prior density of the :attr:`moved_params` up to a constant, ``-inf`` outside the prior's
        support, ``(M,)``: the target of ``alg-star``'s rejuvenation moves (with the likelihood)."""
        raise NotImplementedError(f"task {self.name!r} has no prior density")

    def context_params(self, x: Tensor) -> Envs:
        """The :attr:`observed_params` as the contexts ``x`` ``(M, context_dim)`` show them, each
        ``(M, ...)``: a decision maker conditions on these instead of guessing them. Default: none
        (a task whose known parameters are in its context overrides this)."""
        return {}

    def candidates(self, episodes: int, particles: int, generator: torch.Generator) -> tuple[Envs, int, bool]:
        """Candidate environments for a posterior over ``episodes`` episodes: ``(candidates, N, exact)``
        with ``candidates`` of batch ``episodes · N``, episode ``b``'s in rows ``b N .. (b+1) N - 1``.

        With a finite pool the candidates are the pool, the same for every episode, and the posterior
        over them is exact; otherwise each episode gets ``particles`` independent draws from the
        prior (with ``generator``) for a particle approximation."""
        if self._pool is None:
            return self.sample_prior(episodes * particles, generator), particles, False
        n = self.pool_size
        pool = {k: v.to(generator.device) for k, v in self._pool.items()}
        return (
            {k: v[None].expand(episodes, *v.shape).reshape(episodes * n, *v.shape[1:]) for k, v in pool.items()},
            n,
            True,
        )

    def mean_observation(self, envs: Envs, x: Tensor, a: Tensor, t: int) -> Tensor:
        """``E[O_t | γ, X_t = x, a_t = a]``, ``(B, obs_dim)`` (the demand a pricing model predicts)."""
        raise NotImplementedError(f"task {self.name!r} has no mean observation")

    def params_at_context(self, envs: Envs, x: Tensor) -> Tensor | None:
        """The few numbers of the environment that ``a*`` depends on at context ``x`` (pricing: the
        demand function there, ``(αᵀX, βᵀX)``), ``(B, k)``, for the probes; ``None`` when the task names
        none."""
        return None

    def action_loss(self, pred: Tensor, target: Tensor, action_scale: Tensor) -> Tensor:
        """The pre-training loss :attr:`loss` between predicted and optimal actions ``(..., action_dim)``,
        in units of ``action_scale`` (the model's normalised action units), averaged over positions."""
        return LOSSES[self.loss](pred, target, action_scale)

    # ----------------------------------------------------------------------------------------------
    # Learning without an oracle: the cost of an action against the realised outcome.
    def outcome_cost(self, a: Tensor, o: Tensor, x: Tensor) -> Tensor:
        """The cost action ``a`` would have paid had the outcome been ``o``, in context ``x``: ``(...)``
        for ``a (..., action_dim)``, ``o (..., obs_dim)``, ``x (..., context_dim)``.

        Only for tasks whose reward is a known function of the action and an outcome the action does not
        influence (exogenous: the uncensored newsvendor's demand). Then ``E[cost(a, O) | H_t]`` is the
        expected cost of ``a`` under the posterior predictive given the history, so training on it
        (:meth:`cost_loss`) makes the network's minimiser the Bayes action -- no oracle needed. Where
        the outcome depends on the action played (pricing's demand, a bandit's reward, censored sales)
        the cost of another action is counterfactual: such tasks do not implement it."""
        raise NotImplementedError(f"task {self.name!r} has no outcome cost")

    def cost_loss(self, pred: Tensor, observations: Tensor, contexts: Tensor, action_scale: Tensor) -> Tensor:
        """The pre-training loss of ``target: cost``: :meth:`outcome_cost` of the predicted actions
        ``(B, T, action_dim)`` against the realised outcomes ``(B, T, obs_dim)`` in the contexts
        ``(B, T, context_dim)``, averaged over positions and divided by the mean action scale (the
        model's normalised units, as :meth:`action_loss`: for a cost linear in ``a`` on each side, as
        the newsvendor's, a change of units)."""
        return self.outcome_cost(pred, observations, contexts).mean() / action_scale.mean()

    # Options a test may set without shifting the prior (a data set's part, the newsvendor's critical
    # ratio of a model trained on a range of them): benchmarks are tuned at the test's values of these.
    evaluation_options: ClassVar[tuple[str, ...]] = ()

    def test_options(self) -> dict:
        """The options a model trained on this task is tested with where no one names them (its
        reference card): none for a prior, whose test environments come from test seeds; a data-set task
        names its test part (and one critical ratio)."""
        return {}

    def validation_task(self) -> "Task":
        """The task whose environments validate a model trained on this one (its fixed validation
        environments and checkpoint choice): itself for a prior, which validation seeds keep apart
        from training; a data-set task returns its validation part."""
        return self

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

    def action_from_output(
        self, output: Tensor, generator: torch.Generator | None = None, greedy: bool = False
    ) -> Tensor:
        """Turn the model's read-out into an action: the identity for continuous tasks (discrete
        tasks sample from the softmax, or take the argmax when ``greedy``)."""
        return output

    # ----------------------------------------------------------------------------------------------
    # Shared machinery.
    @property
    def feature_dim(self) -> int:
        """Size of a feature token ``(O_{t-1}, X_t)``."""
        return self.obs_dim + self.context_dim

    @property
    def pool(self) -> Envs | None:
        """The finite pool's environments (``pool_size`` of them), or ``None`` for the full prior."""
        return self._pool

    @property
    def hidden_params(self) -> tuple[str, ...]:
        """The prior's parameters that the decision maker never sees (everything but
        :attr:`observed_params`)."""
        one = self.sample_prior(1, torch.Generator().manual_seed(0))
        return tuple(k for k in one if k not in self.observed_params)

    def sample_envs(self, n: int, generator: torch.Generator) -> Envs:
        """Draw ``n`` environments from the prior: with a pool, its hidden parameters uniformly from
        the pool and the :attr:`observed_params` fresh from the full prior."""
        if self._pool is None:
            return self.sample_prior(n, generator)
        device = generator.device
        idx = torch.randint(self.pool_size, (n,), generator=generator, device=device)
        envs = {k: v.to(device)[idx] for k, v in self._pool.items()}
        if self.observed_params:
            fresh = self.sample_prior(n, generator)
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

    def optimal_reward(self, envs: Envs, x: Tensor, t: int, a_star: Tensor | None = None) -> Tensor:
        """The reward the regret of step ``t`` is measured against, ``(B,)``: ``r(X_t, a*_t)`` in the
        state the step is played in. Stateful tasks whose benchmark is a whole optimal policy override
        it (queueing: the optimal policy's expected reward at ``t``; revenue: the hindsight bound's
        increment). ``a_star``: the step's optimal action when the caller already has it."""
        a_star = self.optimal_action(envs, x, t) if a_star is None else a_star
        return self.expected_reward(envs, x, a_star, t)

    def regret(self, envs: Envs, x: Tensor, a: Tensor, t: int, a_star: Tensor | None = None) -> Tensor:
        """Per-step pseudo-regret :meth:`optimal_reward` ``-`` :meth:`expected_reward`, ``(B,)``, in the
        contexts' dtype (a float64 benchmark is subtracted in float64 first). Tasks override
        :meth:`optimal_reward`, never this: the rollout records both terms and their difference."""
        return step_regret(self.optimal_reward(envs, x, t, a_star), self.expected_reward(envs, x, a, t), x.dtype)

    def suboptimality(self, envs: Envs, x: Tensor, a: Tensor, t: int, a_star: Tensor | None = None) -> Tensor:
        """Action suboptimality ``|a*_t - a_t|`` (Euclidean norm for vector actions), shape ``(B,)``."""
        a_star = self.optimal_action(envs, x, t) if a_star is None else a_star
        return torch.linalg.vector_norm(a - a_star, dim=-1)

    def options(self) -> dict:
        """The constructor options this task was built with (saved in checkpoints)."""
        return dict(self._options)


def step_regret(best: Tensor, reward: Tensor, dtype: torch.dtype) -> Tensor:
    """``best - reward`` in the wider of their dtypes, returned in ``dtype``: the one subtraction behind
    :meth:`Task.regret` and the rollout's recorded regrets."""
    return (best - reward).to(dtype)


# The pre-training losses (paper §3), in normalised action units.
def _mse(pred: Tensor, target: Tensor, scale: Tensor) -> Tensor:
    return ((pred - target) / scale).pow(2).mean()


def _l1(pred: Tensor, target: Tensor, scale: Tensor) -> Tensor:
    return ((pred - target) / scale).abs().mean()


def _cross_entropy(logits: Tensor, target: Tensor, scale: Tensor) -> Tensor:
    """Discrete actions: logits against the one-hot optimal action (no scaling)."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, -2), target.flatten(0, -2).argmax(-1))


LOSSES: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {"mse": _mse, "l1": _l1, "ce": _cross_entropy}
