"""The OMGPT network: a causal sequence model over interleaved feature / action tokens.

Token layout (SPEC §1, paper appendix A.1): ``(O_0,X_1), a_1, (O_1,X_2), a_2, …, (O_{t-1},X_t)``.
Feature and action tokens have their own linear embeddings; a linear read-out at every feature token
predicts ``a*_t``, so one forward pass over a length-``T`` history trains all ``T`` decisions at once.
With ``obs_head`` (paper §3.5.3) a second read-out at every action token ``a_t`` predicts the
observation ``O_t`` that playing it will produce, from ``H_t ∪ {a_t}``.

Two backbones sit behind one interface, :class:`SequenceModel`: the paper's GPT-2 style transformer
(:class:`GPT`) and the LSTM of the paper's architecture comparison (appendix "Impact of Network
Architecture", :class:`LSTM`). They share the embeddings, the read-outs, the scaling, the
teacher-forced pass and incremental decoding; a backbone only says how it turns a token sequence into
hidden states (``_run``) and what it carries between decoding calls (``start_cache``/``clear_cache``).

During a rollout the GPT keeps a KV cache (the LSTM its recurrent state), so deciding at step ``t``
costs only the two new tokens ``a_{t-1}, (O_{t-1}, X_t)`` instead of re-encoding the ``2t-1`` tokens
of the history (see ``benchmarks/`` for the measured speed-up). The cache lives in plain attributes
(never in checkpoints, never synchronised by DDP) and takes the dtype of the activations, so it works
under bf16 autocast.

Reading order: config, the shared model, attention, MLP, block, GPT, LSTM.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from omgpt.tasks.base import Scaling

BACKBONES = ("gpt", "lstm")


@dataclass
class GPTConfig:
    feature_dim: int  # size of a feature token (O_{t-1}, X_t); set from the task
    action_dim: int  # size of an action token and of the read-out; set from the task
    n_layer: int = 4  # transformer blocks or LSTM layers (paper: 12; LSTM: 5 and 12)
    n_head: int = 4  # attention heads (paper: 16); unused by the LSTM
    n_embd: int = 64  # embedding width (paper: 256, for both backbones)
    dropout: float = 0.05  # paper: 0.05
    max_steps: int = 100  # longest history (in decision steps) the model sees: horizon, or window W
    bias: bool = True  # biases in Linear, LayerNorm and LSTM, as GPT-2
    backbone: str = "gpt"  # "gpt" (the paper's transformer) or "lstm" (its architecture comparison)
    obs_dim: int = 0  # observation coordinates: the first obs_dim columns of a feature token
    obs_head: bool = False  # also predict O_t at every action token a_t (paper §3.5.3)

    def __post_init__(self):
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone must be one of {', '.join(BACKBONES)}, got {self.backbone!r}")
        if self.obs_head and not 0 < self.obs_dim <= self.feature_dim:
            raise ValueError(f"obs_head needs 0 < obs_dim <= feature_dim, got obs_dim={self.obs_dim}")


def build_model(cfg: GPTConfig, scaling: Scaling | None = None) -> "SequenceModel":
    """The network ``cfg.backbone`` names."""
    return (GPT if cfg.backbone == "gpt" else LSTM)(cfg, scaling)


class SequenceModel(nn.Module):
    """Maps a history's feature and action tokens to a predicted optimal action at every step (and,
    with ``obs_head``, to a predicted observation at every action).

    Inputs and outputs are in the task's raw units; the model normalises them with the task's
    :class:`~omgpt.tasks.base.Scaling` (stored as buffers, so a checkpoint carries its own scaling).
    Observations are predicted in the scaling of the feature token's observation columns.

    A backbone subclass implements ``build_backbone`` (its layers, created between the embeddings and
    the read-outs), ``_run(tokens, start)`` (hidden states of embedded tokens; ``start=None`` is the
    causal training pass, ``start=p`` continues the decoding state at token position ``p``),
    ``start_cache`` and ``clear_cache``.
    """

    def __init__(self, cfg: GPTConfig, scaling: Scaling | None = None):
        super().__init__()
        self.cfg = cfg
        if scaling is None:
            scaling = Scaling((0.0,) * cfg.feature_dim, (1.0,) * cfg.feature_dim, (0.0,) * cfg.action_dim, (1.0,) * cfg.action_dim)
        for name in ("feature_loc", "feature_scale", "action_loc", "action_scale"):
            self.register_buffer(name, torch.tensor(getattr(scaling, name), dtype=torch.float32))
        self.feature_emb = nn.Linear(cfg.feature_dim, cfg.n_embd)
        self.action_emb = nn.Linear(cfg.action_dim, cfg.n_embd)
        self.build_backbone(cfg)
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.action_head = nn.Linear(cfg.n_embd, cfg.action_dim)
        self.apply(self._init_weights)
        self.obs_head = None
        if cfg.obs_head:  # drawn aside: switching the head on leaves every other initial weight as it was
            with torch.random.fork_rng(devices=[]):
                self.obs_head = nn.Linear(cfg.n_embd, cfg.obs_dim)
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
    def build_backbone(self, cfg: GPTConfig) -> None:
        raise NotImplementedError

    def _run(self, tokens: Tensor, start: int | None) -> Tensor:
        raise NotImplementedError

    def start_cache(self, max_steps: int | None = None) -> None:
        """Prepare the decoding state for an episode of up to ``max_steps`` decisions."""
        raise NotImplementedError

    def clear_cache(self) -> None:
        raise NotImplementedError

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

    def read_obs(self, hidden: Tensor) -> Tensor:
        """Final LayerNorm and observation head, in raw observation units."""
        if self.obs_head is None:
            raise ValueError("this model has no observation head (train it with obs_head=True)")
        return self.obs_head(self.ln_f(hidden)) * self.obs_scale + self.obs_loc

    def forward(self, features: Tensor, actions: Tensor, observations: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher-forced pass. ``features (B, T, feature_dim)``, ``actions (B, T, action_dim)`` ->
        predicted ``a*_t`` at every step, ``(B, T, action_dim)``; prediction ``t`` sees only the
        ``2t-1`` tokens up to feature token ``t``. With ``observations=True`` also the predicted
        ``O_t`` at every action token, ``(B, T, obs_dim)``, each seeing the ``2t`` tokens up to ``a_t``."""
        B, T, _ = features.shape
        if T > self.cfg.max_steps:
            raise ValueError(f"history of {T} steps exceeds the model's max_steps={self.cfg.max_steps}; use a window")
        f, a = self.embed_features(features), self.embed_actions(actions)  # (B, T, D) each
        tokens = torch.stack([f, a], dim=2).reshape(B, 2 * T, -1)  # (O_0,X_1), a_1, (O_1,X_2), ...
        hidden = self._run(tokens, None)  # (B, 2T, D)
        pred = self.read_out(hidden[:, 0::2])  # read out a* at feature tokens
        return (pred, self.read_obs(hidden[:, 1::2])) if observations else pred

    def predict_observations(self, features: Tensor, actions: Tensor) -> Tensor:
        """``Ô_t`` at every action token in raw units, ``(B, T, obs_dim)`` (needs ``obs_head``)."""
        return self(features, actions, observations=True)[1]

    def decode(self, t: int, feature: Tensor, prev_action: Tensor | None) -> Tensor:
        """Action at step ``t`` (0-based) from the cache plus the new tokens ``a_{t-1}`` (absent at
        ``t = 0``) and ``(O_{t-1}, X_t)``; ``feature (B, feature_dim)``, ``prev_action (B, action_dim)``."""
        new = [self.embed_features(feature)[:, None]]
        if t > 0:
            new.insert(0, self.embed_actions(prev_action)[:, None])
        tokens = torch.cat(new, dim=1)  # (B, 1 or 2, D)
        hidden = self._run(tokens, start=max(0, 2 * t - 1))
        return self.read_out(hidden[:, -1])

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
class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be divisible by n_head"
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.cache: tuple[Tensor, Tensor] | None = None  # (k, v), each (B, n_head, max_tokens, head_dim)
        self.cache_len = 0  # max_tokens of the cache to allocate at the next start

    def forward(self, x: Tensor, start: int | None = None) -> Tensor:
        """``start=None``: full causal pass (training). ``start=p``: the tokens sit at positions
        ``p, p+1, …`` and attend to the cached keys of positions ``< p`` as well (decoding)."""
        B, L, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (z.view(B, L, self.n_head, D // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, H, L, hd)
        if start is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        else:
            if start == 0 or self.cache is None or self.cache[0].shape[0] != B:
                shape = (B, self.n_head, self.cache_len, D // self.n_head)
                self.cache = (k.new_zeros(shape), v.new_zeros(shape))
            ck, cv = self.cache
            ck[:, :, start : start + L], cv[:, :, start : start + L] = k, v
            k, v = ck[:, :, : start + L], cv[:, :, : start + L]
            # New token i (position start+i) may see every position <= start+i.
            mask = None if L == 1 else torch.ones(L, start + L, dtype=torch.bool, device=x.device).tril(start)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(B, L, D)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block, as GPT-2."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, start: int | None = None) -> Tensor:
        x = x + self.attn(self.ln1(x), start)
        return x + self.mlp(self.ln2(x))


class GPT(SequenceModel):
    """The paper's backbone: learned positional embeddings (``2·max_steps`` token positions) and
    pre-LayerNorm causal self-attention blocks; decoding keeps a KV cache per block."""

    def __init__(self, cfg: GPTConfig, scaling: Scaling | None = None):
        super().__init__(cfg, scaling)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def build_backbone(self, cfg: GPTConfig) -> None:
        self.pos_emb = nn.Embedding(2 * cfg.max_steps, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))

    def _run(self, tokens: Tensor, start: int | None) -> Tensor:
        first = 0 if start is None else start
        pos = torch.arange(first, first + tokens.shape[1], device=tokens.device)
        x = self.drop(tokens + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x, start)
        return x

    def start_cache(self, max_steps: int | None = None) -> None:
        """Prepare the KV cache for an episode of up to ``max_steps`` decisions (``2·max_steps-1`` tokens)."""
        n = 2 * (max_steps or self.cfg.max_steps) - 1
        for block in self.blocks:
            block.attn.cache, block.attn.cache_len = None, n

    def clear_cache(self) -> None:
        for block in self.blocks:
            block.attn.cache = None


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

    def build_backbone(self, cfg: GPTConfig) -> None:
        self.drop = nn.Dropout(cfg.dropout)
        between = cfg.dropout if cfg.n_layer > 1 else 0.0  # nn.LSTM's dropout acts between layers only
        self.lstm = nn.LSTM(cfg.n_embd, cfg.n_embd, num_layers=cfg.n_layer, bias=cfg.bias, batch_first=True, dropout=between)
        self.state: tuple[Tensor, Tensor] | None = None  # (h, c), each (n_layer, B, n_embd)
        self.state_len = 0  # tokens the state has consumed

    def _run(self, tokens: Tensor, start: int | None) -> Tensor:
        if start is None:
            return self.lstm(self.drop(tokens))[0]
        if start == 0:
            self.state, self.state_len = None, 0
        if start != self.state_len:
            raise RuntimeError(f"LSTM decoding is sequential: the state is at token {self.state_len}, not {start}")
        hidden, self.state = self.lstm(self.drop(tokens), self.state)
        self.state_len += tokens.shape[1]
        return hidden

    def start_cache(self, max_steps: int | None = None) -> None:
        self.clear_cache()

    def clear_cache(self) -> None:
        self.state, self.state_len = None, 0
