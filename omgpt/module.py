"""OMGPTModule: the supervised pre-training logic (paper §3.3) around the plain ``GPT`` network, and
:func:`load_module`, its safe loader (the checks a checkpoint must pass: :mod:`omgpt.checkpoints`)."""
from __future__ import annotations

import inspect
import math
import os
import random
import time

import lightning as L
import torch
from torch import Tensor

from omgpt import seeding
from omgpt.seeding import Stream, stream_seed
from omgpt import checks
from omgpt.checkpoints import all_finite, check_resumable, check_weights, resume_after_last_batch
from omgpt.errors import OMGPTError
from omgpt.files import read_checkpoint
from omgpt.metrics import MeanCurve
from omgpt.model import BACKBONES, ModelConfig, build_model
from omgpt.policies import make_policy
from omgpt.rollout import History, mean_observations, restarted, rollout
from omgpt.tasks import make_episode_task
from omgpt.tasks.base import Task

POSITIVE_INT, UNIT = dict(integer=True, low=1), dict(low=0, high=1, high_open=True)  # bounds for checks.number


def validation_envs(task: Task, runs: int, val_seed: int) -> dict[str, Tensor]:
    """The fixed validation environments: drawn once from their own seed, never the test ones."""
    return task.sample_envs(runs, torch.Generator().manual_seed(stream_seed(Stream.VALIDATION_ENVS, val_seed)))


def validation_rollout(task: Task, envs: dict[str, Tensor], idx: Tensor, policy, horizon: int, val_seed: int, device="cpu") -> History:
    """One validation batch (``envs[idx]``) played by ``policy`` with the batch's own seed: what the
    module validates on, so that any other policy (``alg-star``, a benchmark) can be measured on the
    very same episodes."""
    part = {k: v[idx].to(device) for k, v in envs.items()}
    g = torch.Generator(device=device).manual_seed(stream_seed(Stream.VALIDATION_PLAY, val_seed, int(idx[0])))
    return rollout(task, part, policy, horizon, g)


class OMGPTModule(L.LightningModule):
    """Pre-trains a GPT (or an LSTM) to predict ``a*_t`` from the history at every step.

    Loss: the task's ``l`` (absolute for newsvendor, squared for pricing, ...) between predicted and
    optimal actions, averaged over all decision positions of the batch, in the task's normalised
    action units; with ``obs_head``, ``train/loss`` is ``l + w·l'`` (logged apart as ``train/action_loss``
    and ``train/obs_loss``). Validation plays the model online (KV-cached rollouts) on fixed validation
    environments and logs the mean final regret ``val/regret`` and ``val/regret_ucb``, that mean plus
    one standard deviation across the validation environments (the authors' checkpoint rule, docs/paper-gaps.md §6).

    Args:
        task: task name, e.g. ``newsvendor`` (see ``omgpt.tasks``).
        task_options: options of the task (``pool_size``, ``dim``, ...).
        horizon: target horizon ``T``; sizes the positional table and the validation rollouts.
        n_layer, n_head, n_embd, dropout: GPT shape (paper: 12, 16, 256, 0.05).
        lr, weight_decay, betas: AdamW (paper: 1e-4, 1e-4).
        warmup_steps: linear learning-rate warm-up from 0.
        schedule: ``constant`` (paper) or ``cosine`` decay to ``min_lr_ratio · lr`` at the last step.
        min_lr_ratio: floor of the cosine schedule.
        val_seed: seed of the validation environments and their context/noise streams.
        backbone: ``gpt`` (the paper's transformer) or ``lstm`` (its architecture comparison; ``n_head``
            is then unused).
        obs_head: also predict ``O_t``, the outcome of every action (paper §3.5.3), and train on ``l + w·l'``,
            ``l'`` the squared error of the observation in the feature scaling of its columns.
        obs_loss_weight: ``w`` above.
        window: context window ``W`` (paper §3.5.1): the model sees at most ``W`` steps, in training
            (a random ``W``-step slice of longer histories), validation and rollouts; its positional
            table covers ``W`` steps, so it can act for any horizon. ``None``: the whole ``horizon``.
        target: what the network is trained to predict: ``optimal_action`` (the paper's: ``a*`` under the
            task's loss) or ``cost`` (learning without an oracle: the task's own cost of the predicted
            action against the realised outcome, :meth:`~omgpt.tasks.base.Task.cost_loss`; for tasks
            whose reward is a known function of the action and an exogenous outcome). ``None``: the
            task's :attr:`~omgpt.tasks.base.Task.default_target` (``cost`` on real data, which has no ``a*``).
        layout: ``paper`` (feature and action tokens interleaved, the paper's), ``compact`` (one token
            per decision step) or ``transition`` (one token per step holding the whole last transition;
            see :mod:`omgpt.model`).
        pos_encoding: ``learned`` (the paper's table), ``rope`` or ``none``; the LSTM takes ``learned``
            (the default, which it ignores).
    """

    def __init__(
        self,
        task: str = "newsvendor",
        task_options: dict | None = None,
        horizon: int = 100,
        n_layer: int = 4,
        n_head: int = 4,
        n_embd: int = 64,
        dropout: float = 0.05,
        lr: float = 1e-4,
        weight_decay: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_steps: int = 0,
        schedule: str = "constant",
        min_lr_ratio: float = 0.1,
        val_seed: int = 10_000,
        backbone: str = "gpt",
        obs_head: bool = False,
        obs_loss_weight: float = 1.0,
        window: int | None = None,
        layout: str = "paper",
        pos_encoding: str = "learned",
        target: str | None = None,
    ):
        super().__init__()
        for name, value, bounds in (
            ("horizon", horizon, POSITIVE_INT), ("n_layer", n_layer, POSITIVE_INT), ("n_head", n_head, POSITIVE_INT),
            ("n_embd", n_embd, POSITIVE_INT), ("window", window, dict(POSITIVE_INT, none=True)),
            ("warmup_steps", warmup_steps, dict(integer=True, low=0)), ("lr", lr, dict(low=0, low_open=True)),
            ("weight_decay", weight_decay, dict(low=0)), ("dropout", dropout, UNIT), ("min_lr_ratio", min_lr_ratio, dict(low=0, high=1)),
            ("obs_loss_weight", obs_loss_weight, dict(low=0)), *((f"betas[{i}]", b, UNIT) for i, b in enumerate(betas)),
        ):  # fmt: skip
            checks.number(f"model.{name}", value, **bounds)
        seeding.check_validation_seed(checks.seed("model.val_seed", val_seed), "model.val_seed")
        if window is not None and window > horizon:  # a window is a slice of the training histories
            raise OMGPTError(f"model.window ({window}) must not exceed model.horizon ({horizon}): the model never sees more than the horizon")
        if schedule not in ("constant", "cosine"):
            raise OMGPTError(f"schedule must be 'constant' or 'cosine', got {schedule!r}")
        if backbone not in BACKBONES:
            raise OMGPTError(f"backbone must be one of {', '.join(BACKBONES)}, got {backbone!r}")
        if backbone == "gpt" and n_embd % n_head:
            raise OMGPTError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")
        if backbone == "gpt":  # its positional table holds 2·T·n_embd weights, with AdamW's two moments 3x that
            checks.memory(3 * 4 * 2 * (window or horizon) * n_embd, f"a GPT for histories of {window or horizon} steps")
        self.save_hyperparameters()
        self.task = make_episode_task(task, task_options, horizon)
        self.target = check_target(self.task, target)
        try:
            cfg = ModelConfig(
                self.task.feature_dim, self.task.action_dim, n_layer, n_head, n_embd, dropout, max_steps=window or horizon,
                backbone=backbone, obs_dim=self.task.obs_dim, obs_head=obs_head, layout=layout, pos_encoding=pos_encoding,
            )
        except ValueError as e:  # an impossible combination of options: one line for the user
            raise OMGPTError(str(e)) from None
        self.model = build_model(cfg, self.task.scaling())
        self.val_regret = MeanCurve(horizon)
        self.val_subopt = MeanCurve(horizon)
        # the observation head's error on the validation rollouts, per step: its learning curve (where
        # the task knows its expected observation)
        tracked = obs_head and window is None and type(self.task).mean_observation is not Task.mean_observation
        self.val_obs = MeanCurve(horizon) if tracked else None
        # tasks that score a part by total cost over total demand (real demand: the scaled pinball loss,
        # ruled by the windows with most demand, not by a few tiny-level ones) log it as val/scaled_cost
        self.val_totals = MeanCurve(2) if hasattr(self.task, "window_totals") else None
        self._val_envs = None

    # ---------------------------------------------------------------------------------------------
    def loss(self, pred: Tensor, target: Tensor) -> Tensor:
        """The task's loss in normalised action units, averaged over every decision position."""
        return self.task.action_loss(pred, target, self.model.action_scale)

    def target_loss(self, pred: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The pre-training loss of the predicted actions ``(B, T, action_dim)`` of ``batch``: :meth:`loss`
        against ``a*`` or, with ``target: cost``, the task's cost against the realised outcomes (the
        contexts ``X_t`` are the feature tokens' columns after ``O_{t-1}``), in normalised action units."""
        if self.target == "cost":
            contexts = batch["features"][..., self.task.obs_dim :]
            return self.task.cost_loss(pred, batch["observations"], contexts, self.model.action_scale)
        return self.loss(pred, batch["targets"])

    def obs_loss(self, pred: Tensor, features: Tensor, observations: Tensor | None = None) -> Tensor:
        """``l'``: squared error of ``Ô_t`` (predicted at action token ``t``) against ``O_t``, in the
        feature scaling of the observation columns. Without ``observations (B, T, obs_dim)`` in the
        batch, ``O_t`` is read off the next feature token ``(O_t, X_{t+1})``: the last action token then
        has no target and is left out (so that position is never trained)."""
        target = observations
        if target is None:
            pred, target = pred[:, :-1], features[:, 1:, : self.task.obs_dim]
        if pred.shape[1] == 0:  # one-step histories: zero, but keep the head in the graph (DDP)
            return pred.sum() * 0.0
        return ((pred - target) / self.model.obs_scale).pow(2).mean()

    def window_slice(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """With a context window ``W`` shorter than the batch's histories, keep one random ``W``-step
        slice of every ``(B, T, ·)`` tensor. The slice is a history of its own: its positions restart at
        0 and its first feature token's observation is zeroed, as at an episode's start -- exactly what
        the windowed rollout feeds the model at ``t >= W`` (``tokens_at(..., restart=True)``). The start is shared by the batch and drawn from a generator seeded by
        (global seed, global step, batch index, rank), so a resumed run slices as the original did."""
        W, T = self.hparams.window, batch["features"].shape[1]
        if W is None or T <= W:
            return batch
        g = torch.Generator().manual_seed(stream_seed(Stream.WINDOW_SLICE, torch.initial_seed(), self.global_step, batch_idx, self.global_rank))
        s = int(torch.randint(T - W + 1, (), generator=g))
        sliced = {k: v[:, s : s + W] if v.dim() > 1 else v for k, v in batch.items()}
        if s > 0:
            sliced["features"] = restarted(sliced["features"], self.task.obs_dim)
        return sliced

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        horizon = batch["features"].shape[1]
        batch = self.window_slice(batch, batch_idx)
        if self.hparams.obs_head:
            pred, obs = self.model(batch["features"], batch["actions"], observations=True)
            action_loss, obs_loss = self.target_loss(pred, batch), self.obs_loss(obs, batch["features"], batch.get("observations"))
            loss = action_loss + self.hparams.obs_loss_weight * obs_loss
            self.log("train/action_loss", action_loss)
            self.log("train/obs_loss", obs_loss)
        else:
            loss = self.target_loss(self.model(batch["features"], batch["actions"]), batch)
        self._loss_finite = bool(torch.isfinite(loss))  # judged with the gradients, before the update
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/horizon", float(horizon), on_step=False, on_epoch=True, sync_dist=True)
        return loss

    # The guard against a diverging fit: no update with a non-finite gradient reaches the weights, and
    # no non-finite weight reaches a checkpoint. A finite loss does not make a finite update (at
    # --model.lr 1e5 the gradients overflow while the loss is still finite), so the gradients are
    # checked before every optimizer step -- after DDP's all-reduce, so every rank decides alike --
    # and the weights right after it, before any hook or checkpoint callback sees them. Either
    # stops the fit (FloatingPointError: one line from the CLI), leaving every checkpoint as it was.
    def on_before_optimizer_step(self, optimizer) -> None:
        if getattr(self.trainer.precision_plugin, "scaler", None) is not None:
            return  # fp16 loss scaling skips steps with overflowing gradients itself
        if not all_finite(p.grad for p in self.parameters() if p.grad is not None):
            what = "gradient" if getattr(self, "_loss_finite", True) else "training loss"
            raise FloatingPointError(f"non-finite {what} at step {self.global_step}")

    def optimizer_step(self, *args, **kwargs) -> None:
        super().optimizer_step(*args, **kwargs)
        if not all_finite(self.parameters()):
            raise FloatingPointError(f"non-finite weights after the update at step {self.global_step}")

    # ---------------------------------------------------------------------------------------------
    def validation_step(self, batch: Tensor, batch_idx: int) -> None:
        if self._val_envs is None:
            self._val_task = self.task.validation_task()
            self._val_envs = validation_envs(self._val_task, len(self.trainer.val_dataloaders.dataset), self.hparams.val_seed)
        task = self._val_task
        policy = make_policy("omgpt", task, model=self.model, window=self.hparams.window)
        history = validation_rollout(task, self._val_envs, batch.cpu(), policy, self.hparams.horizon, self.hparams.val_seed, self.device)
        self.val_regret.update(history.cumulative_regret())
        self.val_subopt.update(history.suboptimality)
        if self.val_totals is not None:
            self.val_totals.update(torch.stack(task.window_totals(history), dim=-1))
        if self.val_obs is not None:  # squared error against the expected observation, raw units
            predicted = self.model.predict_observations(*history.tokens())
            self.val_obs.update((predicted - mean_observations(task, history)).pow(2).sum(-1))

    def on_fit_start(self) -> None:
        # the clocks count the run's training time, a resumed fit adding to its checkpoint's
        done_wall, done_cpu = getattr(self, "_trained_minutes", (0.0, 0.0))
        self._fit_start = time.perf_counter() - 60 * done_wall, time.process_time() - 60 * done_cpu

    def trained_minutes(self) -> tuple[float, float]:
        """(wall, CPU) minutes this run has trained, over every resume."""
        if not hasattr(self, "_fit_start"):
            return getattr(self, "_trained_minutes", (0.0, 0.0))
        wall, cpu = self._fit_start
        return (time.perf_counter() - wall) / 60, (time.process_time() - cpu) / 60

    def on_validation_epoch_end(self) -> None:
        # compute() already reduced over ranks; sync_dist only silences Lightning's DDP warning.
        regret, subopt = self.val_regret.compute(), self.val_subopt.compute()
        self.log("val/regret", regret[-1], prog_bar=True, sync_dist=True)
        # the paper authors' checkpoint rule: lowest mean + one standard deviation across environments
        self.log("val/regret_ucb", regret[-1] + self.val_regret.std()[-1], sync_dist=True)
        self.log("val/suboptimality", subopt[-1], sync_dist=True)
        if self.val_totals is not None:  # means of (cost, demand) per window: their ratio is the sums'
            cost, demand = self.val_totals.compute().double()
            self.log("val/scaled_cost", (cost / demand).float(), sync_dist=True)
            self.val_totals.reset()
        if hasattr(self, "_fit_start"):  # time the run has trained, for plots against time
            wall, cpu = self.trained_minutes()
            self.log("time/wall_minutes", wall, sync_dist=True)
            # CPU time of the process: with one thread, the wall-clock it would take on an idle core,
            # whatever else shares the machine (what the recipe study plots against)
            self.log("time/cpu_minutes", cpu, sync_dist=True)
        if self.val_obs is not None:
            # after T-1 samples, as demand prediction's report reads it (analysis.demand_prediction)
            self.log("val/obs_mse", self.val_obs.compute()[-1], sync_dist=True)
            self.val_obs.reset()
        self.val_regret.reset()
        self.val_subopt.reset()

    # ---------------------------------------------------------------------------------------------
    # Lightning does not checkpoint the global RNGs; dropout draws from torch's, so without them a
    # resumed run would train on different dropout masks than an uninterrupted one.
    # Only rank 0's checkpoint is written: every rank restores its RNGs, so they must be the same on
    # every rank -- they are, seeded alike and drawn alike; for CUDA that holds for each rank's own
    # device (rank k draws dropout masks on device k), so save the current device's state only.
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rng"] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        checkpoint["trained_minutes"] = self.trained_minutes()
        if torch.cuda.is_available():
            checkpoint["rng"]["cuda"] = torch.cuda.get_rng_state()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # Called before Lightning loads the weights, for every checkpoint path a fit or validation
        # resolves (the last/best aliases included): a mismatch is one line here, not a traceback there.
        path = getattr(self.trainer, "ckpt_path", None) if self._trainer else None
        check_resumable(checkpoint, dict(self.hparams), path)
        check_weights(checkpoint, self, path)
        resume_after_last_batch(checkpoint)
        self._trained_minutes = tuple(checkpoint.get("trained_minutes", (0.0, 0.0)))
        rng = checkpoint.get("rng")
        if rng is not None:
            torch.set_rng_state(rng["torch"])
            random.setstate(rng["python"])
            if isinstance(rng.get("cuda"), torch.Tensor) and torch.cuda.is_available():
                torch.cuda.set_rng_state(rng["cuda"])

    def configure_optimizers(self):
        hp = self.hparams
        opt = torch.optim.AdamW(self.model.optimizer_groups(hp.weight_decay), lr=hp.lr, betas=tuple(hp.betas))
        total = max(1, int(self.trainer.estimated_stepping_batches)) if self.trainer is not None else 1

        def factor(step: int) -> float:
            if step < hp.warmup_steps:
                return (step + 1) / hp.warmup_steps
            if hp.schedule == "constant":
                return 1.0
            progress = min(1.0, (step - hp.warmup_steps) / max(1, total - hp.warmup_steps))
            return hp.min_lr_ratio + (1 - hp.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


TARGETS = ("optimal_action", "cost")


def check_target(task: Task, target: str | None) -> str:
    """The pre-training target for ``task`` (``None``: the task's default), or one line saying why the
    task cannot be trained on it."""
    target = task.default_target if target is None else target
    if target not in TARGETS:
        raise OMGPTError(f"model.target must be one of {', '.join(TARGETS)}, got {target!r}")
    if target == "cost" and not task.has_outcome_cost:
        raise OMGPTError(f"task {task.name!r} has no outcome cost to train on (its reward is not a function of the action and an outcome "
                         f"the action does not change); use model.target optimal_action")
    if target == "optimal_action" and not task.has_optimal_action:
        raise OMGPTError(f"task {task.name!r} has no optimal action to imitate (its a* is the hindsight outcome, and imitating it "
                         f"learns the wrong quantile); use model.target cost")
    return target


def load_module(path: str, map_location: str | torch.device = "cpu") -> OMGPTModule:
    """Load a trained module from a Lightning checkpoint, safely (:func:`omgpt.files.read_checkpoint`:
    a downloaded checkpoint cannot run code). A folder stands for its ``model.ckpt``
    (``pretrained/<name>/``). Missing, unreadable, foreign or diverged checkpoints -- hyper-parameters
    this module does not take, tensors of the wrong shape, non-finite weights -- raise
    :class:`OMGPTError`."""
    if os.path.isdir(path):
        path = os.path.join(path, "model.ckpt")
    ckpt = read_checkpoint(path, map_location)
    if "hyper_parameters" not in ckpt:
        raise OMGPTError(f"{path} is not an OMGPT checkpoint (no hyper_parameters)")
    hparams = {k: v for k, v in ckpt["hyper_parameters"].items() if not k.startswith("_")}
    unknown = sorted(set(hparams) - set(inspect.signature(OMGPTModule.__init__).parameters))
    if unknown:
        raise OMGPTError(f"checkpoint {path} has hyper-parameters OMGPTModule does not take: {', '.join(unknown)}")
    module = OMGPTModule(**hparams)
    check_weights(ckpt, module, path)
    module.load_state_dict(ckpt["state_dict"])
    if not all_finite(ckpt["state_dict"].values()):
        raise OMGPTError(f"checkpoint {path} has non-finite weights: its fit diverged")
    return module.eval()
