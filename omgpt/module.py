"""OMGPTModule: the supervised pre-training logic (paper §3.3) around the plain ``GPT`` network, and
:func:`load_module`, its safe loader (the checks a checkpoint must pass: :mod:`omgpt.checkpoints`)."""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import asdict

import lightning as L
import torch
from torch import Tensor

from omgpt import seeding
from omgpt.seeding import Stream, stream_seed
from omgpt import checks
from omgpt.checkpoints import (
    all_finite,
    changed_settings,
    check_resumable,
    check_weights,
    read_checkpoint,
    resume_after_last_batch,
)
from omgpt.errors import OMGPTError
from omgpt.metrics import MeanCurve
from omgpt.model import ModelConfig, NetworkConfig, build_model, check_network_memory, checkpoint_hparams, load_model
from omgpt.settings import FinetuneConfig, OptimConfig
from omgpt.policies import make_policy
from omgpt.rollout import History, mean_observations, restarted, rollout
from omgpt.tasks import make_episode_task
from omgpt.targets import bayes_action_targets, posterior_loss, posterior_targets
from omgpt.tasks.base import Task

POSITIVE_INT = dict(integer=True, low=1)  # bounds for checks.number


def validation_envs(task: Task, runs: int, val_seed: int) -> dict[str, Tensor]:
    """The fixed validation environments: drawn once from their own seed, never the test ones."""
    return task.sample_envs(runs, torch.Generator().manual_seed(stream_seed(Stream.VALIDATION_ENVS, val_seed)))


def validation_rollout(
    task: Task, envs: dict[str, Tensor], idx: Tensor, policy, horizon: int, val_seed: int, device="cpu"
) -> History:
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
    action units; with ``network.obs_head``, ``train/loss`` is ``l + w·l'`` (logged apart as ``train/action_loss``
    and ``train/obs_loss``). Validation plays the model online (KV-cached rollouts) on fixed validation
    environments and logs the mean final regret ``val/regret`` and ``val/regret_ucb``, that mean plus
    one standard deviation across the validation environments (the authors' checkpoint rule, docs/paper-gaps.md §6).

    Args:
        task: task name, e.g. ``newsvendor`` (see ``omgpt.tasks``).
        task_options: options of the task (``pool_size``, ``dim``, ...).
        horizon: target horizon ``T``; sizes the positional table and the validation rollouts.
        network: the network's architecture (:class:`~omgpt.model.NetworkConfig`: backbone, layers,
            heads, width, dropout, token layout, position encoding, observation head; a dict works
            too). In YAML ``model: {network: {n_layer: 8}}``, on the command line
            ``--model.network.n_layer 8``.
        optim: the optimiser (:class:`~omgpt.settings.OptimConfig`: AdamW's ``lr``, ``weight_decay``,
            ``betas``; ``warmup_steps``, ``schedule``, ``min_lr_ratio``). ``--model.optim.lr 1e-3``.
        finetune: fine-tuning on regret (:class:`~omgpt.settings.FinetuneConfig`: ``objective``,
            ``init_from``, the gradient's ``estimator`` and its settings, the trust region; docs/finetune.md,
            ``configs/finetune/regret.yaml`` layers them on a supervised config). ``--model.finetune.objective regret``.
        val_seed: seed of the validation environments and their context/noise streams.
        obs_loss_weight: with ``network.obs_head`` (the observation ``O_t`` predicted too, paper §3.5.3),
            train on ``l + w·l'``, ``l'`` the squared error of the observation in the feature scaling of
            its columns; this is ``w``.
        window: context window ``W`` (paper §3.5.1): the model sees at most ``W`` steps, in training
            (a random ``W``-step slice of longer histories), validation and rollouts; its positional
            table covers ``W`` steps, so it can act for any horizon. ``None``: the whole ``horizon``.
        target: what the network is trained to predict: ``optimal_action`` (the paper's: ``a*`` under the
            task's loss), ``posterior`` (the same loss averaged over the posterior of the environment given
            the history, :mod:`omgpt.targets`: the same minimiser, a gradient of lower variance; tasks
            with a likelihood, whole histories), ``bayes_action`` (the grid action of highest
            posterior-expected value given the history, where the task values its grid actions: the
            queue's service rate, whose squared loss's Bayes decision -- the posterior mean of ``a*``,
            rounded -- is not the best rate) or ``cost`` (learning without an oracle: the task's own
            cost of the predicted action against the realised outcome,
            :meth:`~omgpt.tasks.base.Task.cost_loss`; for tasks whose reward is a known function of the
            action and an exogenous outcome). ``None``: the task's
            :attr:`~omgpt.tasks.base.Task.default_target` (``cost`` on real data, which has no ``a*``).
        obs_target: with ``network.obs_head``, what ``l'`` compares the predicted observation with:
            ``observation`` (the paper's: the realised ``O_t``) or ``mean`` (its noise-free expectation
            ``E[O_t | γ, X_t, a_t]``, the task's ``mean_observation``: the same minimiser without the
            noise's variance in the loss).

    """

    def __init__(
        self,
        task: str = "newsvendor",
        task_options: dict | None = None,
        horizon: int = 100,
        network: NetworkConfig = NetworkConfig(),
        optim: OptimConfig = OptimConfig(),
        finetune: FinetuneConfig = FinetuneConfig(),
        val_seed: int = 10_000,
        obs_loss_weight: float = 1.0,
        window: int | None = None,
        target: str | None = None,
        obs_target: str = "observation",
    ):
        super().__init__()
        for name, value, bounds in (
            ("horizon", horizon, POSITIVE_INT),
            ("window", window, dict(POSITIVE_INT, none=True)),
            ("obs_loss_weight", obs_loss_weight, dict(low=0)),
        ):
            checks.number(f"model.{name}", value, **bounds)
        seeding.check_validation_seed(checks.seed("model.val_seed", val_seed), "model.val_seed")
        if window is not None and window > horizon:  # a window is a slice of the training histories
            raise OMGPTError(
                f"model.window ({window}) must not exceed model.horizon ({horizon}): the model never sees more than the horizon"
            )
        net, self.optim, self.finetune = NetworkConfig.of(network), OptimConfig.of(optim), FinetuneConfig.of(finetune)
        check_network_memory(net, copies=4, what="its weights, their gradients and AdamW's two moments")
        if net.backbone == "gpt":  # its positional table holds 2·T·n_embd weights, with AdamW's two moments 3x that
            checks.memory(
                3 * 4 * 2 * (window or horizon) * net.n_embd, f"a GPT for histories of {window or horizon} steps"
            )
        # what save_hyperparameters records (it reads the arguments' local names): plain data
        network, optim, finetune = asdict(net), asdict(self.optim), asdict(self.finetune)
        self.save_hyperparameters()
        self.task = make_episode_task(task, task_options, horizon)
        self.target = check_target(self.task, target, window)
        check_obs_target(self.task, obs_target, net.obs_head)
        check_finetuning(self.task, self.finetune, window)
        try:
            cfg = ModelConfig.build(net, self.task, max_steps=window or horizon)
        except ValueError as e:  # an impossible combination of options: one line for the user
            raise OMGPTError(str(e)) from None
        self.model = build_model(cfg, self.task.scaling())
        self.val_regret = MeanCurve(horizon)
        self.val_subopt = MeanCurve(horizon)
        # the observation head's error on the validation rollouts, per step: its learning curve (where
        # the task knows its expected observation)
        tracked = net.obs_head and window is None and self.task.has_mean_observation
        self.val_obs = MeanCurve(horizon) if tracked else None
        # tasks that score a part by total cost over total demand (real demand: the scaled pinball loss,
        # ruled by the windows with most demand, not by a few tiny-level ones) log it as val/scaled_cost
        self.val_totals = MeanCurve(2) if hasattr(self.task, "window_totals") else None
        self._val_envs = None
        self._anchor: list[Tensor] | None = None  # the init_from weights θ₀ (fine-tuning's trust region)

    # ---------------------------------------------------------------------------------------------
    def loss(self, pred: Tensor, target: Tensor) -> Tensor:
        """The task's loss in normalised action units, averaged over every decision position."""
        return self.task.action_loss(pred, target, self.model.action_scale)

    def with_targets(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """``batch`` with what its loss needs beyond the histories: with ``target: posterior`` the
        candidates' optimal actions and their posterior weights at every step (:mod:`omgpt.targets`),
        the particles seeded by (global seed, step, batch index, rank) so a resumed run draws alike."""
        if self.target not in ("posterior", "bayes_action"):
            return batch
        g = torch.Generator(device=self.device).manual_seed(
            stream_seed(Stream.POSTERIOR_TARGETS, torch.initial_seed(), self.global_step, batch_idx, self.global_rank)
        )
        contexts = batch["features"][..., self.task.obs_dim :]
        played = (self.task, contexts, batch["actions"], batch["observations"], g)
        if self.target == "bayes_action":  # the best grid action under the posterior replaces a*
            return {**batch, "targets": bayes_action_targets(*played)}
        return {**batch, **posterior_targets(*played)}

    def target_loss(self, pred: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The pre-training loss of the predicted actions ``(B, T, action_dim)`` of ``batch``: :meth:`loss`
        against ``a*``, its posterior average (``target: posterior``, :meth:`with_targets` has added the
        candidates) or, with ``target: cost``, the task's cost against the realised outcomes (the
        contexts ``X_t`` are the feature tokens' columns after ``O_{t-1}``), in normalised action units."""
        if self.target == "posterior":
            return posterior_loss(self.task, pred, batch["candidates"], batch["posterior"], self.model.action_scale)
        if self.target == "cost":
            contexts = batch["features"][..., self.task.obs_dim :]
            return self.task.cost_loss(pred, batch["observations"], contexts, self.model.action_scale)
        return self.loss(pred, batch["targets"])

    def obs_loss(
        self,
        pred: Tensor,
        features: Tensor,
        observations: Tensor | None = None,
        mean_observations: Tensor | None = None,
    ) -> Tensor:
        """``l'``: squared error of ``Ô_t`` (predicted at action token ``t``) against ``O_t`` -- or, with
        ``obs_target: mean``, against ``mean_observations`` ``E[O_t | γ, X_t, a_t]`` -- in the feature
        scaling of the observation columns. Without ``observations (B, T, obs_dim)`` in the batch,
        ``O_t`` is read off the next feature token ``(O_t, X_{t+1})``: the last action token then has no
        target and is left out (so that position is never trained)."""
        target = observations
        if self.hparams.get("obs_target") == "mean":
            if mean_observations is None:
                raise OMGPTError(
                    "model.obs_target mean needs the histories' mean_observations: train with HistoryDataModule"
                )
            target = mean_observations
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
        g = torch.Generator().manual_seed(
            stream_seed(Stream.WINDOW_SLICE, torch.initial_seed(), self.global_step, batch_idx, self.global_rank)
        )
        s = int(torch.randint(T - W + 1, (), generator=g))
        sliced = {k: v[:, s : s + W] if v.dim() > 1 else v for k, v in batch.items()}
        if s > 0:
            sliced["features"] = restarted(sliced["features"], self.task.obs_dim)
        return sliced

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        if self.finetune.objective == "regret":
            return self.finetuning_step(batch, batch_idx)
        horizon = batch["features"].shape[1]
        batch = self.window_slice(self.with_targets(batch, batch_idx), batch_idx)
        if self.model.cfg.obs_head:
            pred, obs = self.model(batch["features"], batch["actions"], observations=True)
            action_loss, obs_loss = (
                self.target_loss(pred, batch),
                self.obs_loss(obs, batch["features"], batch.get("observations"), batch.get("mean_observations")),
            )
            loss = action_loss + self.hparams.obs_loss_weight * obs_loss
            self.log("train/action_loss", action_loss)
            self.log("train/obs_loss", obs_loss)
        else:
            loss = self.target_loss(self.model(batch["features"], batch["actions"]), batch)
        self._loss_finite = bool(torch.isfinite(loss))  # judged with the gradients, before the update
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/horizon", float(horizon), on_step=False, on_epoch=True, sync_dist=True)
        return loss

    # ---------------------------------------------------------------------------------------------
    # Fine-tuning on the regret of the model's own decisions (docs/finetune.md).
    def setup(self, stage: str) -> None:
        # Weights only, before Lightning restores a --ckpt_path (which then replaces them: a resumed
        # fine-tuning run continues from its own checkpoint); θ₀ is re-read from the same file.
        if stage == "fit" and self.finetune.init_from is not None:
            self._anchor = load_init_weights(self, self.finetune.init_from)

    def regret_loss(self) -> tuple[Tensor, Tensor]:
        """The regret objective on one batch of the model's own rollouts: ``(loss, regret)``, the loss
        whose gradient estimates that of the mean cumulative regret at the horizon, and that regret.

        ``rollout_envs`` environments come from the training prior (or pool) on a stream of the fit's
        seed, the step and the rank (so a resumed run plays what the uninterrupted one did, and no
        validation or test seed is touched), and are played through the one rollout loop.

        * ``pathwise``: the rollout records autograd's graph (the KV cache included) and the loss is
          the regret itself. The task draws its noise first and computes the observation from the
          action, so the gradient also flows from an action through the observations it produced into
          every later decision: the value of exploration. It sees only what the task's ``observe`` and
          ``project`` are differentiable in (the unit-ball projection is; a clamp has zero gradient
          outside the box, a censoring min none through the censored branch, rounding none at all).
        * ``score``: ``group_size`` rollouts of the same environments on the same task noise (common
          random numbers), apart only in the stochastic head's draws; :func:`score_function_loss`
          weighs each draw's log-probability by its regret to go less the other rollouts' mean.
        """
        hp, ft, task = self.hparams, self.finetune, self.task
        keys = (torch.initial_seed(), self.global_step, self.global_rank)
        envs_gen = torch.Generator().manual_seed(stream_seed(Stream.REGRET_ENVS, *keys))
        envs = {k: v.to(self.device) for k, v in task.sample_envs(ft.rollout_envs, envs_gen).items()}

        def task_noise() -> torch.Generator:  # the same contexts and noise for every rollout of the group
            return torch.Generator(device=self.device).manual_seed(stream_seed(Stream.REGRET_TASK, *keys))

        if ft.estimator == "pathwise":
            policy = make_policy("omgpt", task, model=self.model, differentiable=True, feedback_grad=ft.feedback_grad)
            regret = rollout(task, envs, policy, hp.horizon, task_noise(), differentiable=True).regrets.sum(1).mean()
            return regret, regret.detach()
        regrets, log_probs = [], []
        for k in range(ft.group_size):
            policy = make_policy("omgpt", task, model=self.model, explore_std=None if task.discrete else ft.explore_std)
            own = torch.Generator(device=self.device).manual_seed(stream_seed(Stream.REGRET_HEAD, *keys, k))
            history = rollout(task, envs, policy, hp.horizon, task_noise(), policy_generator=own)
            regrets.append(history.regrets)
            log_probs.append(self.log_prob(history, policy.samples))
        regrets = torch.stack(regrets)
        return score_function_loss(regrets, torch.stack(log_probs)), regrets.sum(-1).mean()

    def log_prob(self, history: History, samples: Tensor | None) -> Tensor:
        """``log π(a_t | H_t)`` of the stochastic head's draws in a rollout, ``(B, T)``, with autograd: one
        teacher-forced pass over the history gives the read-outs the cached rollout decided with. A
        discrete task's arm was drawn from the softmax of the logits; a continuous one's ``samples`` (the
        draws before the task projected them) from a Gaussian around the prediction (up to a constant)."""
        out = self.model(*history.tokens())
        if self.task.discrete:
            return (torch.log_softmax(out, -1) * history.actions).sum(-1)
        return -0.5 * ((samples - out) / (self.finetune.explore_std * self.model.action_scale)).pow(2).sum(-1)

    def finetuning_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """The regret objective plus, as the trust region's soft part, ``imitation_weight`` times the
        supervised loss on the data's batch."""
        loss, regret = self.regret_loss()
        self.log("train/regret", regret, prog_bar=True)
        if self.finetune.imitation_weight > 0:
            batch = self.with_targets(batch, batch_idx)
            imitation = self.target_loss(self.model(batch["features"], batch["actions"]), batch)
            self.log("train/imitation_loss", imitation)
            loss = loss + self.finetune.imitation_weight * imitation
        if self._anchor is not None:
            self.log("train/trust_distance", self.trust_distance())
        self._loss_finite = bool(torch.isfinite(loss))
        self.log("train/loss", loss)
        return loss

    @torch.no_grad()
    def trust_distance(self) -> Tensor:
        """``‖θ - θ₀‖ / ‖θ₀‖``: how far fine-tuning has moved the weights from the ``init_from`` ones."""
        params = list(self.model.parameters())
        delta = torch.cat([(p - a.to(p.device)).flatten() for p, a in zip(params, self._anchor)])
        return delta.norm() / torch.cat([a.flatten() for a in self._anchor]).norm().to(delta.device)

    @torch.no_grad()
    def keep_in_trust_region(self) -> None:
        """Pull the weights back along the line to ``θ₀`` onto the ball ``‖θ - θ₀‖ ≤ trust_radius · ‖θ₀‖``
        when a step has left it (one ball over all weights)."""
        distance = float(self.trust_distance())
        if distance > self.finetune.trust_radius:
            shrink = self.finetune.trust_radius / distance
            for p, a in zip(self.model.parameters(), self._anchor):
                a = a.to(p.device)
                p.copy_(a + (p - a) * shrink)

    # The guard against a diverging fit: no update with a non-finite gradient reaches the weights, and
    # no non-finite weight reaches a checkpoint. A finite loss does not make a finite update (at
    # --model.optim.lr 1e5 the gradients overflow while the loss is still finite), so the gradients are
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
        if self.finetune.trust_radius is not None:
            self.keep_in_trust_region()
        if not all_finite(self.parameters()):
            raise FloatingPointError(f"non-finite weights after the update at step {self.global_step}")

    # ---------------------------------------------------------------------------------------------
    def validation_step(self, batch: Tensor, batch_idx: int) -> None:
        if self._val_envs is None:
            self._val_task = self.task.validation_task()
            self._val_envs = validation_envs(
                self._val_task, len(self.trainer.val_dataloaders.dataset), self.hparams.val_seed
            )
        task = self._val_task
        policy = make_policy("omgpt", task, model=self.model, window=self.hparams.window)
        history = validation_rollout(
            task, self._val_envs, batch.cpu(), policy, self.hparams.horizon, self.hparams.val_seed, self.device
        )
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
        metrics = {
            "val/regret": regret[-1],
            # the paper authors' checkpoint rule: lowest mean + one standard deviation across environments
            "val/regret_ucb": regret[-1] + self.val_regret.std()[-1],
            "val/suboptimality": subopt[-1],
        }
        if self.val_totals is not None:  # means of (cost, demand) per window: their ratio is the sums'
            cost, demand = self.val_totals.compute().double()
            metrics["val/scaled_cost"] = (cost / demand).float()
            self.val_totals.reset()
        # The progress bar shows the metric that keeps the checkpoint (real demand's val/scaled_cost, the
        # authors' val/regret_ucb), not a number the run is not chosen on.
        shown = next((c.monitor for c in self.trainer.checkpoint_callbacks if c.monitor in metrics), "val/regret")
        for name, value in metrics.items():
            self.log(name, value, prog_bar=name == shown, sync_dist=True)
        if hasattr(self, "_fit_start"):  # time the run has trained, for plots against time
            wall, cpu = self.trained_minutes()
            self.log("time/wall_minutes", wall, sync_dist=True)
            # CPU time of the process: with one thread, the wall-clock it would take on an idle core,
            # whatever else shares the machine (what the recipe study plots against)
            self.log("time/cpu_minutes", cpu, sync_dist=True)
        if self.val_obs is not None:
            # after T-1 samples, as demand prediction's report reads it (analysis.observation_head)
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
        check_resumable(checkpoint_hparams(checkpoint, path), dict(self.hparams), path)
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
        hp = self.optim
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


ACTION_TARGETS = ("optimal_action", "posterior", "bayes_action", "cost")
OBS_TARGETS = ("observation", "mean")


def score_function_loss(regrets: Tensor, log_probs: Tensor) -> Tensor:
    """REINFORCE with a leave-one-out baseline: a loss whose gradient is an unbiased estimate of the
    gradient of the mean cumulative regret.

    ``regrets`` and ``log_probs`` are ``(G, B, T)``: ``G ≥ 2`` rollouts of the same ``B`` environments
    (on common random numbers), the per-step regrets and the log-probabilities (with autograd) of the
    actions drawn. The action of step ``t`` changes only the regrets from ``t`` on, so it is weighed by
    the regret to go ``R_t = Σ_{s≥t} regret_s``, less the mean of the other ``G - 1`` rollouts' ``R_t`` on
    the same environment: a baseline that does not depend on this rollout's own draws (unbiased), and
    that the common random numbers bring close to ``R_t`` (low variance)."""
    to_go = regrets.flip(-1).cumsum(-1).flip(-1)
    baseline = (to_go.sum(0, keepdim=True) - to_go) / (regrets.shape[0] - 1)
    return ((to_go - baseline).detach() * log_probs).sum(-1).mean()


def check_finetuning(task: Task, finetune: FinetuneConfig, window: int | None) -> None:
    """The regret objective's settings on ``task``, or one line saying what does not fit."""
    if finetune.objective == "regret" and finetune.estimator == "pathwise" and task.discrete:
        raise OMGPTError(
            f"task {task.name!r} has discrete actions, which carry no pathwise gradient; use model.finetune.estimator score"
        )
    if finetune.objective == "regret" and window is not None:
        raise OMGPTError("the regret objective plays whole histories: it needs model.window null")


# The settings a checkpoint's weights are only meaningful with: fine-tuning must start from a model of
# this run's task, horizon and architecture (the weights' shapes alone do not tell a layout apart);
# dropout is a training setting (the regret fine-tuning turns it off).
INIT_SETTINGS = ("task", "horizon", "window")
# Task options that choose which environments of the task's prior are drawn, not what a token holds: a
# model of the full prior may start a fit on a pool drawn from it, or on one of its demand types
# (transfer). Every other option must match.
PRIOR_OPTIONS = ("pool_size", "demand_types")


def load_init_weights(module: "OMGPTModule", path: str) -> list[Tensor]:
    """Load the network weights of the checkpoint ``path`` (a folder: its ``model.ckpt``) into
    ``module.model``, and return copies of them (``θ₀``); a checkpoint of other settings is one line."""
    if os.path.isdir(path):
        path = os.path.join(path, "model.ckpt")
    ckpt = read_checkpoint(path)
    trained = checkpoint_hparams(ckpt, path)
    network = [f"network.{k}" for k in trained["network"] if k != "dropout"]
    keys = [*INIT_SETTINGS, "task_options", *network]
    changed = changed_settings(_prior_free(trained), _prior_free(dict(module.hparams)), keys=keys)
    if changed:
        raise OMGPTError(
            f"model.finetune.init_from {path} was trained with {changed}; fine-tune with the settings it was trained with"
        )
    check_weights(ckpt, module, path)
    if not all_finite(ckpt["state_dict"].values()):
        raise OMGPTError(f"model.finetune.init_from {path} has non-finite weights: its fit diverged")
    module.load_state_dict(ckpt["state_dict"])
    return [p.detach().clone() for p in module.model.parameters()]


def _prior_free(settings: dict) -> dict:
    """``settings`` with the task's options resolved (its constructor's defaults filled in, so ``{}`` and
    ``{dim: 6}`` are one pricing prior) and :data:`PRIOR_OPTIONS` left out."""
    import inspect

    from omgpt.tasks import TASKS

    factory = TASKS.get(settings["task"])
    defaults = (
        {}
        if factory is None
        else {
            name: p.default
            for name, p in inspect.signature(factory.cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
    )
    options = {**defaults, **(factory.defaults if factory else {}), **(settings.get("task_options") or {})}
    return {**settings, "task_options": {k: v for k, v in options.items() if k not in PRIOR_OPTIONS}}


def check_target(task: Task, target: str | None, window: int | None = None) -> str:
    """The pre-training target for ``task`` (``None``: the task's default), or one line saying why the
    task cannot be trained on it."""
    target = task.default_target if target is None else target
    if target not in ACTION_TARGETS:
        raise OMGPTError(f"model.target must be one of {', '.join(ACTION_TARGETS)}, got {target!r}")
    if target == "posterior" and not (task.has_likelihood and task.has_optimal_action):
        raise OMGPTError(
            f"task {task.name!r} has no posterior over its environments (no observation likelihood or no optimal "
            "action); use model.target optimal_action"
        )
    if target == "bayes_action" and not (task.has_likelihood and task.has_action_values):
        raise OMGPTError(
            f"task {task.name!r} has no grid of actions it can value under a posterior (action_values); "
            "use model.target posterior or optimal_action"
        )
    if target in ("posterior", "bayes_action") and window is not None:
        raise OMGPTError(
            f"model.target {target} weighs the whole history, a windowed model sees the last model.window steps: "
            "use model.window null"
        )
    if target == "cost" and not task.has_outcome_cost:
        raise OMGPTError(
            f"task {task.name!r} has no outcome cost to train on (its reward is not a function of the action and an outcome "
            f"the action does not change); use model.target optimal_action"
        )
    if target == "optimal_action" and not task.has_optimal_action:
        raise OMGPTError(
            f"task {task.name!r} has no optimal action to imitate (its a* is the hindsight outcome, and imitating it "
            f"learns the wrong quantile); use model.target cost"
        )
    return target


def check_obs_target(task: Task, obs_target: str, obs_head: bool) -> None:
    """The observation head's target, or one line saying why it does not apply."""
    if obs_target not in OBS_TARGETS:
        raise OMGPTError(f"model.obs_target must be one of {', '.join(OBS_TARGETS)}, got {obs_target!r}")
    if obs_target == "mean" and not obs_head:
        raise OMGPTError("model.obs_target mean is the observation head's target: set model.network.obs_head true")
    if obs_target == "mean" and not task.has_mean_observation:
        raise OMGPTError(
            f"task {task.name!r} has no expected observation (mean_observation); use model.obs_target observation"
        )


def load_module(path: str, map_location: str | torch.device = "cpu") -> OMGPTModule:
    """A trained module from a Lightning checkpoint (a folder stands for its ``model.ckpt``,
    ``pretrained/<name>/``): :func:`omgpt.model.load_model`'s network, read and checked there (safely: a
    downloaded checkpoint cannot run code; missing, foreign or diverged files, settings this version does
    not take and ill-fitting tensors are each one :class:`OMGPTError`), in the module its
    hyper-parameters describe. The global RNG is left as it was."""
    model, _, hparams = load_model(path, map_location)
    with torch.random.fork_rng(devices=[]):  # the module's own network is drawn, then replaced
        module = OMGPTModule(**hparams)
    module.model = model
    return module.to(map_location).eval()
