"""OMGPT as a policy: the pre-trained network decides from the history it has seen, via its decoding cache."""

from __future__ import annotations

import torch
from torch import Tensor

from omgpt.model import SequenceModel
from omgpt.policies.base import HistoryPolicy, register_policy
from omgpt.rollout import tokens_at


@register_policy("omgpt")
class ModelPolicy(HistoryPolicy):
    """Acts with a trained network: :class:`~omgpt.model.GPT` or :class:`~omgpt.model.LSTM`.

    Each step feeds only what it adds, ``a_{t-1}`` and ``(O_{t-1}, X_t)`` (and, in the transition
    layout, step ``t-1``'s feature token), through the decoding cache
    (the GPT's KV cache, the LSTM's recurrent state), started in :meth:`reset` for the batch and
    released in :meth:`close`. With a context window ``W`` the model sees only the last ``W`` steps
    (paper §3.5.1); past ``W`` the cache no longer matches the shifted window, so those steps
    re-encode the window's tokens.

    Args:
        model: the network (``OMGPTModule.model``); it is put in eval mode while acting.
        window: context window ``W`` in steps (default: none, the whole history).
        use_cache: decode incrementally (default) or re-encode the whole history at every step (the
            reference the cache is tested and benchmarked against).
        greedy: discrete tasks: play the argmax of the predicted distribution instead of sampling it.
        explore_std: continuous tasks: play ``N(prediction, (explore_std · action_scale)²)`` instead of the
            prediction (the regret objective's stochastic head; its draws, before the task projects
            them, are kept in ``self.samples``). ``None``: the prediction itself.
        differentiable: decide with autograd on (the regret objective's pathwise gradient, inside
            ``rollout(..., differentiable=True)``); otherwise without.
        feedback_grad: with ``differentiable``, the share of the gradient that flows back through each
            context, action and observation the model reads for its later decisions: 1 is the whole
            pathwise gradient, 0 the myopic one (each decision judged on its own step's regret, the
            history it was made on held fixed); a path through ``k`` such reads is weighed ``feedback_grad^k``.
    """

    # On a CPU it plays on one intra-op thread (omgpt.rollout): each step decodes one token per
    # environment, too little for a second thread to pay for its fork and join
    # (benchmarks/rollout_threads.py: 2.4x faster on one, the newsvendor reference model).
    cpu_threads = 1

    def __init__(
        self,
        task,
        model: SequenceModel,
        window: int | None = None,
        use_cache: bool = True,
        greedy: bool = False,
        explore_std: float | None = None,
        differentiable: bool = False,
        feedback_grad: float = 1.0,
    ):
        super().__init__(task)
        self.model, self.window, self.use_cache, self.greedy = model, window, use_cache, greedy
        self.explore_std, self.differentiable, self.feedback_grad = explore_std, differentiable, feedback_grad

    def reset(self, envs, horizon, generator) -> None:
        super().reset(envs, horizon, generator)
        limit = min(horizon, self.window or horizon)  # the longest history the model will see
        if limit > self.model.cfg.max_steps:
            what = f"window {self.window}" if self.window and self.window < horizon else f"horizon {horizon}"
            raise ValueError(
                f"{what} exceeds the model's max_steps={self.model.cfg.max_steps}; use a window <= {self.model.cfg.max_steps}"
            )
        self.model.eval()
        self.model.start_cache(self.batch, limit)
        param = next(self.model.parameters())
        self.xs, self.actions, self.observations = (
            z.to(param.device) for z in (self.xs, self.actions, self.observations)
        )
        self.samples = torch.zeros_like(self.actions) if self.explore_std is not None else None

    def act(self, t: int, x: Tensor) -> Tensor:
        return super().act(t, self._damped(x))

    def observe(self, t: int, actions: Tensor, observations: Tensor) -> None:
        super().observe(t, self._damped(actions), self._damped(observations))

    def _damped(self, z: Tensor) -> Tensor:
        """``z`` as it is, with its gradient scaled by ``feedback_grad`` (what the model reads of its history)."""
        if not self.differentiable or self.feedback_grad == 1:
            return z
        return z.detach() + self.feedback_grad * (z - z.detach())

    def decide(self, t: int, x: Tensor) -> Tensor:
        with torch.set_grad_enabled(self.differentiable):
            a = self._predict(t)
        if self.explore_std is not None and not self.task.discrete:  # discrete tasks sample their softmax already
            noise = torch.randn(a.shape, generator=self.generator, device=self.generator.device).to(a.device)
            a = a + self.explore_std * self.model.action_scale * noise
            self.samples[:, t] = a
        # the activations' dtype (bf16 under autocast) back to the contexts' (float32; float64 in the gradient test)
        return self.task.action_from_output(a.to(x.dtype).to(x.device), self.generator, self.greedy)

    def _predict(self, t: int) -> Tensor:
        """The network's read-out at step ``t``: the predicted ``a*_t`` (logits on discrete tasks)."""
        model = self.model
        if self.use_cache and (self.window is None or t < self.window):
            features = tokens_at(self.xs, self.actions, self.observations, t, window=2)[0]  # steps t-1 (if any) and t
            prev_feature, prev_action = (features[:, 0], self.actions[:, t - 1]) if t > 0 else (None, None)
            a = model.decode(t, features[:, -1], prev_action, prev_feature)
        else:  # re-encode the (windowed) history, a window read as a history of its own
            a = model(*tokens_at(self.xs, self.actions, self.observations, t, self.window, restart=True))[:, -1]
        return a

    def close(self) -> None:
        self.model.clear_cache()
