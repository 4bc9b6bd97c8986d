"""OMGPTModule's grouped training settings, beside the network's (:class:`omgpt.model.NetworkConfig`):
the optimiser (``model.optim``) and fine-tuning on regret (``model.finetune``). In YAML
``model: {optim: {lr: 1.0e-3}}``, on the command line ``--model.optim.lr 1e-3``. A new setting is one
field here: the CLI, the checkpoint's hyper-parameters and :func:`omgpt.module.load_module` take it from
the class. Checkpoints written before the grouping hold these settings at the top level
(:func:`omgpt.model.checkpoint_hparams` reads both forms)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from omgpt import checks
from omgpt.errors import OMGPTError

# OMGPTModule's grouped settings, ``model.<group>`` (the network's is omgpt.model.NetworkConfig)
GROUPS = ("network", "optim", "finetune")
SCHEDULES = ("constant", "cosine")
OBJECTIVES, ESTIMATORS = ("imitation", "regret"), ("pathwise", "score")


def read_group(cls, value, key: str):
    """``value`` as the settings group ``cls`` (``model.<key>``): a dict (a checkpoint's
    hyper-parameters, a Python caller's) is read into one, naming any field this version does not have;
    ``None`` is the defaults."""
    if value is None or isinstance(value, cls):
        return value or cls()
    if not isinstance(value, dict):
        raise OMGPTError(f"model.{key} must be a mapping of settings, got {type(value).__name__}")
    unknown = sorted(set(value) - {f.name for f in fields(cls)})
    if unknown:
        raise OMGPTError(f"model.{key} has settings this version does not take: {', '.join(unknown)}")
    return cls(**value)


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    """The optimiser: AdamW with a linear warm-up, then a constant or a cosine learning rate.

    Args:
        lr, weight_decay, betas: AdamW (paper: 1e-4, 1e-4).
        warmup_steps: linear learning-rate warm-up from 0.
        schedule: ``constant`` (paper) or ``cosine`` decay to ``min_lr_ratio · lr`` at the last step.
        min_lr_ratio: floor of the cosine schedule.
    """

    lr: float = 1e-4
    weight_decay: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    schedule: str = "constant"
    min_lr_ratio: float = 0.1

    def __post_init__(self):
        unit = dict(low=0, high=1, high_open=True)
        for name, value, bounds in (
            ("lr", self.lr, dict(low=0, low_open=True)),
            ("weight_decay", self.weight_decay, dict(low=0)),
            *((f"betas[{i}]", b, unit) for i, b in enumerate(self.betas)),
            ("warmup_steps", self.warmup_steps, dict(integer=True, low=0)),
            ("min_lr_ratio", self.min_lr_ratio, dict(low=0, high=1)),
        ):
            checks.number(f"model.optim.{name}", value, **bounds)
        if self.schedule not in SCHEDULES:
            raise OMGPTError(f"model.optim.schedule must be 'constant' or 'cosine', got {self.schedule!r}")

    @classmethod
    def of(cls, value: "OptimConfig | dict | None") -> "OptimConfig":
        return read_group(cls, value, "optim")


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig:
    """Fine-tuning on the regret of the model's own decisions (docs/finetune.md;
    ``configs/finetune/regret.yaml`` layers these on a supervised config).

    Args:
        objective: ``imitation`` (supervised pre-training) or ``regret`` (minimise the mean cumulative
            regret of the model's own rollouts, :meth:`omgpt.module.OMGPTModule.regret_loss`).
        init_from: a checkpoint to start from, weights only (a fresh optimizer and step count); its task
            and network settings must be this run's.
        estimator: the regret's gradient: ``pathwise`` (through the whole differentiable rollout;
            continuous actions) or ``score`` (REINFORCE; discrete or rounded actions).
        feedback_grad: ``pathwise``: the share of the gradient that flows back through each context,
            action and observation the model reads for its later decisions (1: the whole pathwise
            gradient; 0: myopic; in between, a path through ``k`` reads weighs ``feedback_grad^k``).
            Measured on the 100-environment linear bandit (``python -m benchmarks.finetune_regret
            gradients``): the whole gradient through 100 decisions is heavy-tailed (norms 750-6,300 on
            three batches of 32, cosine similarities -0.41 to 0.19); at 0.5 it is consistent (0.94-0.97)
            and still carries part of the value of exploration.
        rollout_envs: environments from the training prior (or pool) rolled out per training step.
        group_size: ``score``: rollouts of each environment on common random numbers, each one's
            baseline the mean of the others (at least 2).
        explore_std: ``score`` on continuous actions: the stochastic head plays
            ``N(prediction, (explore_std · action_scale)²)``; discrete tasks sample their softmax.
        imitation_weight: the trust region's soft part: the supervised loss on the data's batch, added
            to the regret with this weight.
        trust_radius: the trust region's hard part: after every step the weights are pulled back within
            ``‖θ - θ₀‖ ≤ trust_radius · ‖θ₀‖`` of the ``init_from`` weights ``θ₀``. ``None``: no bound.
    """

    objective: str = "imitation"
    init_from: str | None = None
    estimator: str = "pathwise"
    feedback_grad: float = 0.5
    rollout_envs: int = 32
    group_size: int = 4
    explore_std: float = 0.5
    imitation_weight: float = 0.0
    trust_radius: float | None = None

    def __post_init__(self):
        for name, value, bounds in (
            ("feedback_grad", self.feedback_grad, dict(low=0, high=1)),
            ("rollout_envs", self.rollout_envs, dict(integer=True, low=1)),
            ("group_size", self.group_size, dict(integer=True, low=2)),
            ("explore_std", self.explore_std, dict(low=0, low_open=True)),
            ("imitation_weight", self.imitation_weight, dict(low=0)),
            ("trust_radius", self.trust_radius, dict(low=0, none=True)),
        ):
            checks.number(f"model.finetune.{name}", value, **bounds)
        if self.objective not in OBJECTIVES:
            raise OMGPTError(f"model.finetune.objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.estimator not in ESTIMATORS:
            raise OMGPTError(f"model.finetune.estimator must be one of {', '.join(ESTIMATORS)}, got {self.estimator!r}")
        if self.trust_radius is not None and self.init_from is None:
            raise OMGPTError(
                "model.finetune.trust_radius bounds the distance to the model.finetune.init_from weights: "
                "name a checkpoint in model.finetune.init_from"
            )

    @classmethod
    def of(cls, value: "FinetuneConfig | dict | None") -> "FinetuneConfig":
        return read_group(cls, value, "finetune")
