"""The OMGPT network: a causal sequence model over a history's feature and action tokens.

Three token layouts (``ModelConfig.layout``), all built here from the same ``(features, actions)`` pair:

* ``paper`` (docs/paper-gaps.md §1, paper appendix A.1): ``(O_0,X_1), a_1, (O_1,X_2), a_2, …, (O_{t-1},X_t)`` --
  feature and action tokens interleaved, ``2t-1`` tokens for ``t`` decisions; a linear read-out at
  every feature token predicts ``a*_t``. With ``obs_head`` (paper §3.5.3) a second read-out at every
  action token ``a_t`` predicts the observation ``O_t`` that playing it will produce.
* ``compact``: one token per decision, ``e_f(O_{t-1},X_t) + e_a(a_{t-1})`` (no action term for the
  first token of a sequence or window), read out at every token: half the sequence, a quarter of the
  attention. The pair (last action, its outcome) sits in one token, so the model need not learn to
  pair tokens before it can learn from them. Token ``t`` does not hold ``a_t`` (and the next token
  holds ``O_t``), so here ``obs_head`` reads ``Ô_t`` off token ``t`` as a function of the action: a
  quadratic in the normalised ``a_t`` whose coefficients the hidden state gives (:meth:`SequenceModel.read_obs`).
* ``transition``: the compact token plus ``e_p(O_{t-2},X_{t-1})``, the previous step's feature token
  embedded by a third map: token ``t`` then holds the whole last transition ``(X_{t-1}, a_{t-1},
  O_{t-1})`` -- one in-context sample of the regression the task poses (demand on context and price)
  -- beside the new context ``X_t``. In the compact layout ``X_{t-1}`` sits one token back, so the
  model must first learn to fetch it (a previous-token head) before it can regress ``O`` on ``X``.

Either way one forward pass over a length-``T`` history trains all ``T`` decisions at once. Positions
(``ModelConfig.pos_encoding``): a learned table (the paper's), rotary embeddings of queries and keys
(``rope``), or none (causal attention alone orders the tokens).

Two backbones sit behind one interface, :class:`SequenceModel`: the paper's GPT-2 style transformer
(:class:`GPT`) and the LSTM of the paper's architecture comparison (appendix "Impact of Network
Architecture", :class:`LSTM`). They share the embeddings, the read-outs, the scaling, the
teacher-forced pass and incremental decoding; a backbone only says how it turns a token sequence into
hidden states (``_run``) and what it carries between decoding calls (``start_cache``/``clear_cache``).

During a rollout the GPT keeps a KV cache (the LSTM its recurrent state), so deciding at step ``t``
costs only the new tokens instead of re-encoding the history (see ``benchmarks/`` for the measured
speed-up). The cache follows litgpt: :meth:`SequenceModel.start_cache` preallocates it for a batch
and a number of decisions as non-persistent buffers (never in checkpoints; allocated after DDP has
listed its buffers, so never synchronised), :meth:`SequenceModel.decode` writes the new tokens at an
explicit input position, decoding without a started cache or with another batch size raises, and
:meth:`SequenceModel.clear_cache` releases it (every rollout does, at its end). Keys and values are
stored in the parameters' dtype and read back in the activations', so decoding works under bf16
autocast.

:func:`load_model` builds a trained network and its task from a checkpoint without Lightning, which
stays with training (:mod:`omgpt.module`, the ``fit`` command): all that :class:`omgpt.Agent`, a
notebook or a service needs to act.

Reading order: config, the shared model, attention, MLP, block, GPT, LSTM, loading.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from omgpt import checks
from omgpt.errors import OMGPTError
from omgpt.checkpoints import read_checkpoint
from omgpt.settings import GROUPS, FinetuneConfig, OptimConfig, read_group
from omgpt.tasks import make_episode_task
from omgpt.tasks.base import Scaling, Task

BACKBONES = ("gpt", "lstm")
LAYOUTS = ("paper", "compact", "transition")
POS_ENCODINGS = ("learned", "rope", "none")


@dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    """The network's architecture: everything about the network a fit's config sets (``model.network``
    in YAML, ``--model.network.n_layer 8`` on the command line), for either backbone. A new
    hyper-parameter of the network is one field here: the CLI, the checkpoint's hyper-parameters,
    :func:`load_model`, :func:`omgpt.module.load_module` and the network's :class:`ModelConfig` take it
    from this class (``tests/test_cli.py`` adds one and trains a step).

    Args:
        n_layer: transformer blocks or LSTM layers (paper: 12; its LSTMs: 5 and 12).
        n_head: attention heads (paper: 16); unused by the LSTM.
        n_embd: embedding width (paper: 256, for both backbones).
        dropout: dropout probability (paper: 0.05); a training setting, the weights mean the same
            without it (fine-tuning may change it).
        bias: biases in Linear, LayerNorm and LSTM layers, as GPT-2.
        backbone: ``gpt`` (the paper's transformer) or ``lstm`` (its architecture comparison).
        obs_head: also predict ``O_t``, the outcome of ``a_t`` (paper §3.5.3; see ``read_obs``).
        layout: ``paper`` (feature and action tokens interleaved, the paper's), ``compact`` (one token
            per decision step) or ``transition`` (one token per step holding the whole last transition).
        pos_encoding: ``learned`` (the paper's table), ``rope`` (rotary) or ``none``; the LSTM takes
            ``learned`` (the default, which it ignores).
    """

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.05
    bias: bool = True
    backbone: str = "gpt"
    obs_head: bool = False
    layout: str = "paper"
    pos_encoding: str = "learned"

    def __post_init__(self):
        for name, value, bounds in (
            ("n_layer", self.n_layer, dict(integer=True, low=1)),
            ("n_head", self.n_head, dict(integer=True, low=1)),
            ("n_embd", self.n_embd, dict(integer=True, low=1)),
            ("dropout", self.dropout, dict(low=0, high=1, high_open=True)),
        ):
            checks.number(f"model.network.{name}", value, **bounds)
        for name, value, allowed in (
            ("backbone", self.backbone, BACKBONES),
            ("layout", self.layout, LAYOUTS),
            ("pos_encoding", self.pos_encoding, POS_ENCODINGS),
        ):
            if value not in allowed:
                raise OMGPTError(f"model.network.{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.backbone == "gpt" and self.n_embd % self.n_head:
            raise OMGPTError(f"model.network.n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.backbone == "lstm" and self.pos_encoding != "learned":  # "learned" is the default, ignored
            raise OMGPTError(
                f"the LSTM backbone takes no pos_encoding (got {self.pos_encoding!r}): the recurrence orders the tokens"
            )
        if self.pos_encoding == "rope" and (self.n_embd // self.n_head) % 2:
            raise OMGPTError(f"rope needs an even head size, got n_embd/n_head = {self.n_embd // self.n_head}")

    @classmethod
    def of(cls, network: "NetworkConfig | dict | None") -> "NetworkConfig":
        """``network`` as a config: a dict (a checkpoint's hyper-parameters, a Python caller's) is read
        into one, naming any field this version does not have; ``None`` is the defaults."""
        return read_group(cls, network, "network")


@dataclass(frozen=True, kw_only=True)
class ModelConfig(NetworkConfig):
    """What builds a network: its architecture (:class:`NetworkConfig`) and the sizes the task and the
    episode give it. Keyword arguments only: ``ModelConfig(feature_dim=..., action_dim=..., n_layer=2)``."""

    feature_dim: int  # size of a feature token (O_{t-1}, X_t); set from the task
    action_dim: int  # size of an action token and of the read-out; set from the task
    max_steps: int = 100  # longest history (in decision steps) the model sees: horizon, or window W
    obs_dim: int = 0  # observation coordinates: the first obs_dim columns of a feature token

    def __post_init__(self):
        super().__post_init__()
        if self.obs_head and not 0 < self.obs_dim <= self.feature_dim:
            raise OMGPTError(f"obs_head needs 0 < obs_dim <= feature_dim, got obs_dim={self.obs_dim}")

    @classmethod
    def build(cls, network: NetworkConfig, task: Task, max_steps: int) -> "ModelConfig":
        """The config of ``network`` on ``task``'s tokens, for histories of up to ``max_steps`` steps."""
        return cls(
            **asdict(network),
            feature_dim=task.feature_dim,
            action_dim=task.action_dim,
            max_steps=max_steps,
            obs_dim=task.obs_dim,
        )

    @property
    def tokens_per_step(self) -> int:
        return 2 if self.layout == "paper" else 1

    @property
    def obs_basis(self) -> int:
        """Coefficients the observation head gives per observation coordinate: 1 at the paper layout's
        action token (which holds ``a_t``); ``(1, ã, ã²)`` per action coordinate in the one-token layouts."""
        return 1 if self.layout == "paper" else 1 + 2 * self.action_dim

    @property
    def max_tokens(self) -> int:
        """Token positions of the longest history (``2·max_steps`` in the paper layout: the last action
        token is only needed by the observation head)."""
        return self.tokens_per_step * self.max_steps


def build_model(cfg: ModelConfig, scaling: Scaling | None = None) -> "SequenceModel":
    """The network ``cfg.backbone`` names, refused in one line when its weights alone would not fit in
    memory (a config's or a checkpoint's ``n_layer: 1e12`` is not allocated until the machine gives out)."""
    check_network_memory(cfg, copies=1, what="its weights")
    return (GPT if cfg.backbone == "gpt" else LSTM)(cfg, scaling)


def check_network_memory(network: NetworkConfig, copies: int, what: str) -> None:
    """Refuse a network whose blocks' weights, ``copies`` times (training: with their gradients and
    AdamW's two moments, 4), need more memory than is free."""
    # a transformer block's float32 weights (an LSTM layer's): 12 (8) n_embd² of them
    per_layer = (12 if network.backbone == "gpt" else 8) * network.n_embd**2
    checks.memory(
        4.0 * copies * network.n_layer * per_layer,
        f"a network of {network.n_layer} layers x {network.n_embd} dims ({what})",
        advice="use fewer layers (model.network.n_layer) or a narrower network (model.network.n_embd)",
    )


class SequenceModel(nn.Module):
    """Maps a history's feature and action tokens to a predicted optimal action at every step (and,
    with ``obs_head``, to a predicted observation at every action).

    Inputs and outputs are in the task's raw units; the model normalises them with the task's
    :class:`~omgpt.tasks.base.Scaling` (stored as buffers, so a checkpoint carries its own scaling).
    Observations are predicted in the scaling of the feature token's observation columns.

    A backbone subclass implements ``build_backbone`` (its layers, created between the embeddings and
    the read-outs), ``_run(tokens, input_pos)`` (hidden states of embedded tokens; ``input_pos=None`` is
    the causal training pass, ``input_pos=p`` continues the decoding state with tokens at positions
    ``p, p+1, …``), ``start_cache`` and ``clear_cache``.
    """

    def __init__(self, cfg: ModelConfig, scaling: Scaling | None = None):
        super().__init__()
        self.cfg = cfg
        if scaling is None:
            scaling = Scaling(
                (0.0,) * cfg.feature_dim, (1.0,) * cfg.feature_dim, (0.0,) * cfg.action_dim, (1.0,) * cfg.action_dim
            )
        for name in ("feature_loc", "feature_scale", "action_loc", "action_scale"):
            self.register_buffer(name, torch.tensor(getattr(scaling, name), dtype=torch.float32))
        self.feature_emb = nn.Linear(cfg.feature_dim, cfg.n_embd)
        self.action_emb = nn.Linear(cfg.action_dim, cfg.n_embd)
        # the transition layout's map of the previous feature token (only there: the other layouts'
        # initial weights stay as they were)
        self.prev_feature_emb = nn.Linear(cfg.feature_dim, cfg.n_embd) if cfg.layout == "transition" else None
        self.build_backbone(cfg)
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.action_head = nn.Linear(cfg.n_embd, cfg.action_dim)
        self.apply(self._init_weights)
        self.obs_head = None
        if cfg.obs_head:  # drawn aside: switching the head on leaves every other initial weight as it was
            with torch.random.fork_rng(devices=[]):
                self.obs_head = nn.Linear(cfg.n_embd, cfg.obs_dim * cfg.obs_basis)
                self._init_weights(self.obs_head)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    # ---------------------------------------------------------------------------------------------
    # What a backbone implements.
    def build_backbone(self, cfg: ModelConfig) -> None:
        raise NotImplementedError

    def _run(self, tokens: Tensor, input_pos: int | None) -> Tensor:
        raise NotImplementedError

    def start_cache(self, batch_size: int, max_steps: int | None = None) -> None:
        """Allocate the decoding state for ``batch_size`` episodes of up to ``max_steps`` decisions
        (default: the model's ``max_steps``)."""
        raise NotImplementedError

    def clear_cache(self) -> None:
        """Release the decoding state."""
        raise NotImplementedError

    def _cache_steps(self, max_steps: int | None) -> int:
        steps = self.cfg.max_steps if max_steps is None else int(max_steps)
        if not 1 <= steps <= self.cfg.max_steps:
            raise ValueError(f"a cache for {steps} decisions: the model handles 1..{self.cfg.max_steps}; use a window")
        return steps

    # ---------------------------------------------------------------------------------------------
    def embed_features(self, features: Tensor) -> Tensor:
        return self.feature_emb((features - self.feature_loc) / self.feature_scale)

    def embed_actions(self, actions: Tensor) -> Tensor:
        return self.action_emb((actions - self.action_loc) / self.action_scale)

    def read_out(self, hidden: Tensor) -> Tensor:
        """Final LayerNorm and action head, back in raw action units."""
        return self.action_head(self.ln_f(hidden)) * self.action_scale + self.action_loc

    @property
    def obs_loc(self) -> Tensor:
        return self.feature_loc[: self.cfg.obs_dim]

    @property
    def obs_scale(self) -> Tensor:
        return self.feature_scale[: self.cfg.obs_dim]

    def read_obs(self, hidden: Tensor, actions: Tensor | None = None) -> Tensor:
        """Final LayerNorm and observation head, in raw observation units.

        Paper layout: ``hidden`` sits at the action tokens, which hold ``a_t``. One-token layouts: token
        ``t`` holds the history and ``X_t`` but not ``a_t``, so the head gives, per observation
        coordinate, the coefficients of a quadratic in the normalised action ``ã_t`` (``actions``):
        ``Ô_t = c_0 + Σ_k c_k ã_k + c'_k ã_k²``. A price enters demand linearly (linear demand) or
        squared (square demand), so this form holds both exactly; what the model must learn in context
        is the coefficients, as ridge regression must learn its own."""
        if self.obs_head is None:
            raise ValueError("this model has no observation head (train it with obs_head=True)")
        out = self.obs_head(self.ln_f(hidden))
        if self.cfg.layout != "paper":
            a = (actions - self.action_loc) / self.action_scale  # (B, T, action_dim)
            basis = torch.cat([torch.ones_like(a[..., :1]), a, a * a], dim=-1)  # (B, T, obs_basis)
            out = (out.unflatten(-1, (self.cfg.obs_dim, self.cfg.obs_basis)) * basis[..., None, :]).sum(-1)
        return out * self.obs_scale + self.obs_loc

    def tokens(self, features: Tensor, actions: Tensor) -> Tensor:
        """The embedded token sequence of a history in the model's layout -- the one token builder of
        training, evaluation and analysis. ``features (B, T, feature_dim)`` are ``(O_{t-1}, X_t)``,
        ``actions (B, T, action_dim)`` are ``a_t``; returns ``(B, 2T, D)`` (paper) or ``(B, T, D)``
        (compact, where token ``t`` adds ``a_{t-1}`` and the first token has no action term; transition,
        which also adds the previous feature token, none at the first)."""
        f, a = self.embed_features(features), self.embed_actions(actions)  # (B, T, D) each
        if self.cfg.layout == "paper":
            B, T, D = f.shape
            return torch.stack([f, a], dim=2).reshape(B, 2 * T, D)  # (O_0,X_1), a_1, (O_1,X_2), ...
        tokens = f + F.pad(a[:, :-1], (0, 0, 1, 0))  # a shifted one step right, zeros first
        if self.cfg.layout == "transition":
            tokens = tokens + F.pad(self.embed_prev_features(features[:, :-1]), (0, 0, 1, 0))
        return tokens

    def embed_prev_features(self, features: Tensor) -> Tensor:
        """The transition layout's embedding of the previous step's feature token."""
        return self.prev_feature_emb((features - self.feature_loc) / self.feature_scale)

    def forward(self, features: Tensor, actions: Tensor, observations: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher-forced pass. ``features (B, T, feature_dim)``, ``actions (B, T, action_dim)`` ->
        predicted ``a*_t`` at every step, ``(B, T, action_dim)``; prediction ``t`` sees only
        ``(O_{τ-1}, X_τ)`` for ``τ ≤ t`` and ``a_τ`` for ``τ < t``. With ``observations=True`` also the
        predicted ``O_t`` at every step, ``(B, T, obs_dim)``, which sees ``a_t`` too (as the paper
        layout's action token, or through :meth:`read_obs`'s quadratic in the one-token layouts)."""
        T = features.shape[1]
        if T > self.cfg.max_steps:
            raise ValueError(f"history of {T} steps exceeds the model's max_steps={self.cfg.max_steps}; use a window")
        hidden = self._run(self.tokens(features, actions), None)  # (B, L, D)
        if self.cfg.layout != "paper":
            pred = self.read_out(hidden)
            return (pred, self.read_obs(hidden, actions)) if observations else pred
        pred = self.read_out(hidden[:, 0::2])  # read out a* at feature tokens
        return (pred, self.read_obs(hidden[:, 1::2])) if observations else pred

    def predict_observations(self, features: Tensor, actions: Tensor) -> Tensor:
        """``Ô_t``, the predicted outcome of every ``a_t``, in raw units, ``(B, T, obs_dim)`` (needs ``obs_head``)."""
        return self(features, actions, observations=True)[1]

    def decode(self, t: int, feature: Tensor, prev_action: Tensor | None, prev_feature: Tensor | None = None) -> Tensor:
        """Action at step ``t`` (0-based) from the started cache plus what step ``t`` adds:
        ``(O_{t-1}, X_t)`` and ``a_{t-1}`` (none at ``t = 0``); ``feature (B, feature_dim)``,
        ``prev_action (B, action_dim)``; the transition layout also takes ``prev_feature``, step
        ``t-1``'s feature token. The new tokens are written at input position ``2t - 1`` (paper
        layout: ``a_{t-1}``, then the feature token) or ``t`` (one token per step)."""
        f = self.embed_features(feature)[:, None]  # (B, 1, D)
        if t == 0:
            tokens = f
        elif self.cfg.layout == "paper":
            tokens = torch.cat([self.embed_actions(prev_action)[:, None], f], dim=1)  # (B, 2, D)
        else:
            tokens = f + self.embed_actions(prev_action)[:, None]
            if self.cfg.layout == "transition":
                if prev_feature is None:
                    raise ValueError("the transition layout decodes step t > 0 with the previous step's feature token")
                tokens = tokens + self.embed_prev_features(prev_feature)[:, None]
        input_pos = max(0, 2 * t - 1) if self.cfg.layout == "paper" else t
        return self.read_out(self._run(tokens, input_pos)[:, -1])

    # ---------------------------------------------------------------------------------------------
    def optimizer_groups(self, weight_decay: float) -> list[dict]:
        """nanoGPT's recipe: decay matrices (embeddings, linear and LSTM weights), not biases or norms."""
        decay = [p for p in self.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# -------------------------------------------------------------------------------------------------
# The transformer (the paper's backbone).
def rope_tables(n_positions: int, head_dim: int, base: float = 10_000.0) -> tuple[Tensor, Tensor]:
    """Rotary embedding tables ``cos, sin``, each ``(n_positions, head_dim / 2)`` (Su et al. 2021)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
    angles = torch.arange(n_positions, dtype=torch.float32)[:, None] * inv_freq  # (P, hd/2)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the two halves of every head of ``x (B, H, L, hd)`` by the angles of its positions
    (``cos, sin (L, hd/2)``): a query-key product then depends on the positions' difference only."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be divisible by n_head"
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_drop = nn.Dropout(cfg.dropout)
        # The KV cache: (B, n_head, max_tokens, head_dim) each while decoding, else None (see start_cache).
        self.register_buffer("k_cache", None, persistent=False)
        self.register_buffer("v_cache", None, persistent=False)

    def start_cache(self, batch_size: int, max_tokens: int) -> None:
        w = self.qkv.weight
        shape = (batch_size, self.n_head, max_tokens, w.shape[1] // self.n_head)
        self.k_cache = torch.zeros(shape, dtype=w.dtype, device=w.device)
        self.v_cache = torch.zeros(shape, dtype=w.dtype, device=w.device)

    def clear_cache(self) -> None:
        self.k_cache = self.v_cache = None

    def forward(self, x: Tensor, input_pos: int | None = None, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """``input_pos=None``: full causal pass (training). ``input_pos=p``: the tokens sit at positions
        ``p, p+1, …``; their keys and values are written to the cache there, and they attend to every
        cached position before them as well (decoding). ``rope``: the positions' rotary tables."""
        B, L, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (z.view(B, L, self.n_head, D // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, H, L, hd)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if input_pos is None:
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
            )
        else:
            if self.k_cache is None:
                raise RuntimeError("decoding needs a started KV cache: call start_cache(batch_size, max_steps) first")
            if self.k_cache.shape[0] != B:
                raise RuntimeError(f"the KV cache was started for a batch of {self.k_cache.shape[0]}, not {B}")
            end = input_pos + L
            if end > self.k_cache.shape[2]:
                raise RuntimeError(f"token positions up to {end} exceed the KV cache's {self.k_cache.shape[2]}")
            if torch.is_grad_enabled():  # a differentiable rollout (regret fine-tuning): autograd keeps every
                # step's keys, which an in-place write would overwrite, so each step writes a new cache
                self.k_cache = self.k_cache.slice_scatter(k.to(self.k_cache.dtype), 2, input_pos, end)
                self.v_cache = self.v_cache.slice_scatter(v.to(self.v_cache.dtype), 2, input_pos, end)
            else:
                self.k_cache[:, :, input_pos:end], self.v_cache[:, :, input_pos:end] = k, v
            k, v = self.k_cache[:, :, :end].to(q.dtype), self.v_cache[:, :, :end].to(q.dtype)
            # New token i (position input_pos+i) may see every position <= input_pos+i.
            mask = None if L == 1 else torch.ones(L, end, dtype=torch.bool, device=x.device).tril(input_pos)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(B, L, D)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block, as GPT-2."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, input_pos: int | None = None, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        x = x + self.attn(self.ln1(x), input_pos, rope)
        return x + self.mlp(self.ln2(x))


class GPT(SequenceModel):
    """The paper's backbone: pre-LayerNorm causal self-attention blocks over the token positions
    (a learned table of ``max_tokens`` positions, rotary embeddings, or none); decoding keeps a KV
    cache per block."""

    def __init__(self, cfg: ModelConfig, scaling: Scaling | None = None):
        super().__init__(cfg, scaling)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def build_backbone(self, cfg: ModelConfig) -> None:
        self.pos_emb = nn.Embedding(cfg.max_tokens, cfg.n_embd) if cfg.pos_encoding == "learned" else None
        cos, sin = rope_tables(cfg.max_tokens, cfg.n_embd // cfg.n_head) if cfg.pos_encoding == "rope" else (None, None)
        self.register_buffer("rope_cos", cos, persistent=False)  # derived from the config: not in checkpoints
        self.register_buffer("rope_sin", sin, persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))

    def _run(self, tokens: Tensor, input_pos: int | None) -> Tensor:
        first, L = (0 if input_pos is None else input_pos), tokens.shape[1]
        x, rope = tokens, None
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(first, first + L, device=tokens.device))
        if self.rope_cos is not None:
            rope = self.rope_cos[first : first + L], self.rope_sin[first : first + L]
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, input_pos, rope)
        return x

    def start_cache(self, batch_size: int, max_steps: int | None = None) -> None:
        """Preallocate every block's KV cache for ``batch_size`` episodes of up to ``max_steps``
        decisions (``tokens_per_step · max_steps`` token positions)."""
        n = self.cfg.tokens_per_step * self._cache_steps(max_steps)
        for block in self.blocks:
            block.attn.start_cache(batch_size, n)

    def clear_cache(self) -> None:
        for block in self.blocks:
            block.attn.clear_cache()


# -------------------------------------------------------------------------------------------------
# The recurrent alternative (paper appendix "Impact of Network Architecture").
class LSTM(SequenceModel):
    """A stacked ``nn.LSTM`` (``n_layer`` layers of width ``n_embd``) over the same interleaved tokens,
    with the same embeddings and read-outs. No positional table: the recurrence orders the tokens.

    Decoding carries the recurrent state ``(h, c)`` instead of a KV cache -- constant memory, and
    still only the two new tokens per decision. The state is sequential, so decoding must visit the
    token positions in order (checked). ``max_steps`` is kept as the longest history it was trained on,
    so a model is held to its training length (or a window) exactly as the GPT is.
    """

    def build_backbone(self, cfg: ModelConfig) -> None:
        self.drop = nn.Dropout(cfg.dropout)
        between = cfg.dropout if cfg.n_layer > 1 else 0.0  # nn.LSTM's dropout acts between layers only
        self.lstm = nn.LSTM(
            cfg.n_embd, cfg.n_embd, num_layers=cfg.n_layer, bias=cfg.bias, batch_first=True, dropout=between
        )
        self.clear_cache()

    def _run(self, tokens: Tensor, input_pos: int | None) -> Tensor:
        if input_pos is None:
            return self.lstm(self.drop(tokens))[0]
        if self.batch_size is None:
            raise RuntimeError("decoding needs a started state: call start_cache(batch_size, max_steps) first")
        if tokens.shape[0] != self.batch_size:
            raise RuntimeError(f"the LSTM state was started for a batch of {self.batch_size}, not {tokens.shape[0]}")
        if input_pos != self.state_len:
            raise RuntimeError(f"LSTM decoding is sequential: the state is at token {self.state_len}, not {input_pos}")
        hidden, self.state = self.lstm(self.drop(tokens), self.state)
        self.state_len += tokens.shape[1]
        return hidden

    def start_cache(self, batch_size: int, max_steps: int | None = None) -> None:
        self._cache_steps(max_steps)  # the same limits as the GPT's cache
        self.state, self.state_len, self.batch_size = None, 0, batch_size

    def clear_cache(self) -> None:
        self.state: tuple[Tensor, Tensor] | None = None  # (h, c), each (n_layer, B, n_embd)
        self.state_len = 0  # tokens the state has consumed
        self.batch_size: int | None = None  # the batch the state was started for; None: not decoding


# -------------------------------------------------------------------------------------------------
# Loading a trained network without Lightning.
# A checkpoint's hyper-parameters are OMGPTModule's arguments, by what they decide: the network's
# architecture (``network``, a NetworkConfig as a dict), the episode, and training (the ``optim`` and
# ``finetune`` groups and the rest; read by nobody here). A name in none of them is refused: it may be a
# setting this version does not know that changes what the network computes (tests/test_agent.py keeps
# the groups equal to OMGPTModule's signature).
EPISODE_HPARAMS = ("task", "task_options", "horizon", "window")
TRAINING_HPARAMS = ("optim", "finetune", "val_seed", "obs_loss_weight", "target", "obs_target")
HPARAMS = ("network", *EPISODE_HPARAMS, *TRAINING_HPARAMS)
# The grouped settings; checkpoints written before a group existed hold its settings at the top level.
GROUP_CONFIGS = dict(zip(GROUPS, (NetworkConfig, OptimConfig, FinetuneConfig), strict=True))


def checkpoint_hparams(checkpoint: dict, path: str | os.PathLike | None = None) -> dict:
    """A checkpoint's hyper-parameters in this version's form: Lightning's private entries dropped, each
    group (``network``, ``optim``, ``finetune``) one complete dict (a checkpoint from before a group holds
    its settings at the top level; an absent one had its default), each setting checked. A name
    OMGPTModule does not take is one :class:`OMGPTError`."""
    name = f"checkpoint {path}" if path else "the checkpoint"
    hparams = {k: v for k, v in (checkpoint.get("hyper_parameters") or {}).items() if not k.startswith("_")}
    flat = {
        group: {f.name: hparams.pop(f.name) for f in fields(cls) if f.name in hparams}
        for group, cls in GROUP_CONFIGS.items()
    }
    unknown = sorted(set(hparams) - set(HPARAMS))
    if unknown:
        raise OMGPTError(f"{name} has hyper-parameters OMGPTModule does not take: {', '.join(unknown)}")
    for group, cls in GROUP_CONFIGS.items():
        if flat[group] and group in hparams:
            raise OMGPTError(
                f"{name} has {group} settings both in {group} and at the top level ({', '.join(flat[group])})"
            )
        try:
            hparams[group] = asdict(cls.of(hparams.get(group, flat[group])))
        except OMGPTError as e:
            raise OMGPTError(f"{name}: {e}") from None
    return hparams


def network_config(task: Task, hparams: dict) -> ModelConfig:
    """The network's config that OMGPTModule's arguments ``hparams`` (a checkpoint's, as
    :func:`checkpoint_hparams` reads them) describe on ``task``: ``max_steps`` the context window ``W``
    or else the horizon, as training builds it."""
    return ModelConfig.build(
        NetworkConfig.of(hparams.get("network")), task, hparams.get("window") or hparams["horizon"]
    )


class TrainedModel(NamedTuple):
    """What :func:`load_model` returns: ``model, task, hparams = load_model(path)``."""

    model: SequenceModel  # the network, in eval mode, on the device it was loaded to
    task: Task  # the task it was trained on, built from the checkpoint's task name and options
    hparams: dict  # its hyper-parameters (OMGPTModule's arguments: network, horizon, window, ...)


def load_model(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> TrainedModel:
    """The trained network of an ``omgpt fit`` checkpoint and its task, without Lightning: as litgpt
    loads a model, from a config (the checkpoint's hyper-parameters) and a state dict (its ``model.``
    tensors). A folder stands for its ``model.ckpt`` (``pretrained/<name>/``).

    The file is read by :func:`omgpt.checkpoints.read_checkpoint`, weights-only: a checkpoint cannot run code.
    A missing, truncated, foreign or malicious file, settings the network does not take, tensors that do
    not fit them and non-finite weights (a diverged fit) each raise a one-line :class:`OMGPTError`.
    The global RNG is left as it was (building the network draws initial weights, which the
    checkpoint's then replace)."""
    if not isinstance(path, (str, os.PathLike)):
        raise OMGPTError(
            f"load_model needs the path of a checkpoint or of a model folder, got {type(path).__name__} {path!r}"
        )
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "model.ckpt")
    if not isinstance(map_location, (str, torch.device)):
        raise OMGPTError(
            f"map_location must be a device such as 'cpu' or 'cuda', got {type(map_location).__name__} {map_location!r}"
        )
    map_location = checks.device(str(map_location), "map_location")  # no GPU here: said so, not "is the file complete?"
    ckpt = read_checkpoint(path, map_location)
    if not {"task", "horizon"} <= set(ckpt.get("hyper_parameters") or {}):
        raise OMGPTError(f"{path} is not an OMGPT checkpoint (no task and horizon in its hyper_parameters)")
    hparams = checkpoint_hparams(ckpt, path)
    task = make_episode_task(hparams["task"], hparams.get("task_options"), hparams["horizon"])
    try:
        with torch.random.fork_rng(devices=[]):
            model = build_model(network_config(task, hparams), task.scaling())
    except (ValueError, AssertionError) as e:  # settings no network takes (ModelConfig, the backbones)
        raise OMGPTError(f"checkpoint {path}: {e}") from None
    prefix = "model."  # the network is OMGPTModule.model: its tensors are the module's under this prefix
    weights = {k.removeprefix(prefix): v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    own = {k: v.shape for k, v in model.state_dict().items()}
    wrong = sorted(k for k in own.keys() & weights.keys() if own[k] != weights[k].shape) + sorted(
        own.keys() ^ weights.keys()
    )
    if wrong:
        more = ", ..." if len(wrong) > 1 else ""
        raise OMGPTError(
            f"checkpoint {path}: its weights do not fit the model its settings describe ({prefix}{wrong[0]}{more})"
        )
    if not all(bool(torch.isfinite(v).all()) for v in weights.values() if v.is_floating_point()):
        raise OMGPTError(f"checkpoint {path} has non-finite weights: its fit diverged")
    model.load_state_dict(weights)
    return TrainedModel(model.to(map_location).eval(), task, hparams)
