"""Hidden-state capture: the embedding after every layer of a trained OMGPT, at chosen tokens.

Layer ``0`` is the input of the first block -- the feature / action embeddings plus the positional
embedding (paper §5.3: "the 0-layer representing the input vectors to the GPT model") -- and layer
``k`` (``1..n_layer``) is the output of block ``k``, i.e. the residual stream before the next block (the
last one before the final LayerNorm and read-out). Captured with a forward pre-hook on ``blocks[0]``
and forward hooks on every block, so the model's code and outputs are untouched.

Token positions (0-based, docs/paper-gaps.md §1): the paper layout's history ``(O_0,X_1), a_1, (O_1,X_2), a_2, …``
puts the feature token of decision step ``t`` (1-based, the paper's ``X_t``) at position ``2(t-1)`` and
the action token ``a_t`` at ``2t-1``; the one-token layouts (``compact``, ``transition``) put step ``t``'s
token at ``t-1``. The paper probes the feature token of ``X_100``: :func:`feature_position` ``(100)``.

Everything the probes, t-SNE figures and the ``EmbeddingProbe`` callback (callbacks/probing.py) need goes through
:func:`collect`: draw environments, play them with a policy through the one rollout loop, run one
teacher-forced pass and keep the hidden states of one feature token together with the labels
(demand type, environment parameters, the optimal action, the model's own prediction).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from omgpt.errors import OMGPTError
from omgpt.model import GPT  # the transformer backbone (an LSTM has no blocks to hook)
from omgpt.policies import make_policy
from omgpt.rollout import History, rollout
from omgpt.seeding import AnalysisPart, Stream, stream_seed
from omgpt.tasks.base import Envs, HiddenType, Task


def feature_position(step: int, layout: str = "paper") -> int:
    """Sequence position of the token that decides 1-based step ``t``: the feature token ``(O_{t-1}, X_t)``
    of the paper layout, or step ``t``'s one token in the compact and transition layouts."""
    if step < 1:
        raise OMGPTError(f"step must be a positive integer (1-based, as the paper's X_t), got {step}")
    return 2 * (step - 1) if layout == "paper" else step - 1


@contextmanager
def record_hidden(model: GPT, positions: list[int] | Tensor | None = None):
    """Record the hidden states of every layer while the model runs.

    Yields a list that, after one forward pass, holds ``n_layer + 1`` tensors ``(B, P, D)`` (layer 0 =
    input embedding), each restricted to ``positions`` (all tokens when ``None``), detached. Works with
    the full teacher-forced pass (``model(features, actions)``); the hooks are removed on exit.
    """
    if not hasattr(model, "blocks"):
        raise OMGPTError(
            f"hidden-state capture needs the transformer backbone (a model with blocks); got {type(model).__name__}"
        )
    states: list[Tensor] = []
    pos = None if positions is None else torch.as_tensor(positions, dtype=torch.long)

    def keep(x: Tensor) -> None:
        x = x.detach()
        states.append(x if pos is None else x[:, pos.to(x.device)])

    handles = [model.blocks[0].register_forward_pre_hook(lambda mod, args: keep(args[0]))]
    handles += [block.register_forward_hook(lambda mod, args, out: keep(out)) for block in model.blocks]
    try:
        yield states
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def capture(
    model: GPT, features: Tensor, actions: Tensor, positions: list[int] | Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """One teacher-forced pass; returns ``(hidden, output)``.

    ``hidden`` is ``(n_layer + 1, B, P, D)`` at ``positions`` (every token when ``None``: ``P = 2T`` in
    the paper layout, ``T`` in the one-token layouts);
    ``output`` is exactly ``model(features, actions)``. Put the model in eval mode first (dropout).
    """
    with record_hidden(model, positions) as states:
        output = model(features, actions)
    if len(states) != len(model.blocks) + 1:  # e.g. a model whose forward skips blocks
        raise RuntimeError(f"captured {len(states)} hidden states for {len(model.blocks)} blocks")
    return torch.stack(states), output


@torch.no_grad()
def run_from_layer(model: GPT, hidden: Tensor, layer: int) -> Tensor:
    """Finish the forward pass from the layer-``layer`` hidden states of a whole sequence (``(B, 2T, D)``
    in the paper layout, ``(B, T, D)`` in the one-token layouts): blocks ``layer..n_layer-1`` (with the
    rotary tables of a ``rope`` model), then the read-out at the deciding tokens -> ``(B, T, action_dim)``.
    With ``capture``'s hidden states this reproduces the model's output (the test of the capture)."""
    x, L = hidden, hidden.shape[1]
    rope = None if model.rope_cos is None else (model.rope_cos[:L], model.rope_sin[:L])
    for block in model.blocks[layer:]:
        x = block(x, None, rope)
    return model.read_out(x[:, 0::2] if model.cfg.layout == "paper" else x)


# --------------------------------------------------------------------------------------------------
@dataclass
class Collected:
    """Hidden states of one feature token over a batch of histories, with what can be probed.

    Attributes:
        hidden: ``(n_layer + 1, N, D)`` float32, CPU.
        step: the 1-based step ``t`` whose feature token ``X_t`` was captured.
        optimal_action: ``a*_t`` ``(N, action_dim)``.
        prediction: the model's read-out at ``X_t`` ``(N, action_dim)``.
        params: the environment's parameters, flattened and concatenated ``(N, P)`` (float entries of the
            prior draw, in ``param_names`` order; boolean entries such as ``square`` are labels instead).
        param_names: ``[(name, width), ...]`` of the columns of ``params``.
        labels: boolean / integer environment entries (``{"square": (N,) bool}`` in a mixed prior).
        history: the played histories (CPU), for anything else.
        demand_at_x: ``Task.params_at_context`` at the probed context -- the few numbers of the
            environment that ``a*_t`` depends on there (pricing: ``(αᵀX_t, βᵀX_t)``, ``(N, 2)``), ``None``
            when the task names none.
        hidden_type: ``Task.hidden_type``: the hidden categorical parameter among ``labels`` (the mixed
            prior's demand type), or ``None``.
    """

    hidden: Tensor
    step: int
    optimal_action: Tensor
    prediction: Tensor
    params: Tensor
    param_names: list[tuple[str, int]]
    labels: dict[str, Tensor] = field(default_factory=dict)
    history: History | None = None
    demand_at_x: Tensor | None = None
    hidden_type: HiddenType | None = None

    def types(self) -> Tensor | None:
        """The hidden type of every history as class indices ``(N,)`` long, or ``None``."""
        return None if self.hidden_type is None else self.labels[self.hidden_type.key].long()


def split_envs(envs: Envs) -> tuple[Tensor, list[tuple[str, int]], dict[str, Tensor]]:
    """Float entries -> one ``(N, P)`` parameter matrix (and its column names); the rest -> labels."""
    cols, names, labels = [], [], {}
    for name, v in envs.items():
        if v.dtype.is_floating_point:
            flat = v.reshape(v.shape[0], -1).float().cpu()
            cols.append(flat)
            names.append((name, flat.shape[1]))
        else:
            labels[name] = v.cpu()
    params = torch.cat(cols, dim=1) if cols else torch.zeros(next(iter(envs.values())).shape[0], 0)
    return params, names, labels


def balanced_envs(task: Task, n: int, generator: torch.Generator, balance: bool = True) -> Envs:
    """``n`` environments from the task's prior; with ``balance`` and a hidden type (the mixed prior's
    demand type), every type equally often (interleaved), as the paper's probing sets ("half have
    linear demand"). The type is independent of the other parameters under the prior, so only the type
    is reassigned."""
    envs = task.sample_envs(n, generator)
    if balance and task.hidden_type is not None:
        key, _, classes = task.hidden_type
        types = torch.arange(n, device=envs[key].device) % len(classes)
        envs[key] = types.to(envs[key].dtype)
    return envs


def play_generators(seed: int, part: int, first: int, device="cpu") -> tuple[torch.Generator, torch.Generator]:
    """The task's and the policy's generators for the batch of an analysis starting at environment ``first``."""
    keys = (seed, int(part), first)
    return (
        torch.Generator(device=device).manual_seed(stream_seed(Stream.ANALYSIS_TASK, *keys)),
        torch.Generator(device=device).manual_seed(stream_seed(Stream.ANALYSIS_POLICY, *keys)),
    )


@torch.no_grad()
def collect(
    model: GPT,
    task: Task,
    n: int,
    step: int,
    policy: str = "omgpt",
    seed: int = 0,
    batch_size: int = 256,
    balance: bool = True,
    policy_options: dict | None = None,
    keep_history: bool = False,
    part: AnalysisPart = AnalysisPart.TSNE,
) -> Collected:
    """Play ``n`` fresh environments for ``step`` steps and capture every layer at the feature token
    of ``X_step``.

    ``policy`` plays the histories: ``"omgpt"`` (default) is the model itself through its KV cache --
    the histories it meets at test time; any other registered policy name works too (``random``,
    ``noisy-oracle``, ``alg-star``, …). The environments, the task's draws and the policy's draws are
    streams of ``(seed, part)`` (:class:`~omgpt.seeding.AnalysisPart`: a probe's fitting and test sets
    are two parts of one seed), so two calls with the same seed and part see the same environments
    and contexts. The model is put in eval mode and left in it; the caller restores training mode (see
    ``omgpt.callbacks.EmbeddingProbe``).
    """
    if n < 1:
        raise OMGPTError(f"the number of histories must be a positive integer, got {n}")
    if step > model.cfg.max_steps:
        raise OMGPTError(f"step {step} exceeds the model's horizon ({model.cfg.max_steps} steps)")
    feature_position(step)  # validates step >= 1
    model.eval()
    device = next(model.parameters()).device
    env_gen = torch.Generator(device=device).manual_seed(stream_seed(Stream.ANALYSIS_ENVS, seed, part))
    envs_all = balanced_envs(task, n, env_gen, balance)
    hidden, opt, pred, hists, at_x = [], [], [], [], []
    pos = [feature_position(step, model.cfg.layout)]
    for lo in range(0, n, batch_size):
        envs = {k: v[lo : lo + batch_size] for k, v in envs_all.items()}
        g, policy_g = play_generators(seed, part, lo, device)
        options = dict(policy_options or {})
        if policy == "omgpt":
            options.setdefault("model", model)
        history = rollout(task, envs, make_policy(policy, task, **options), step, g, policy_g)
        model.clear_cache()
        h, out = capture(model, *history.tokens(), pos)
        hidden.append(h[:, :, 0].float().cpu())
        pred.append(out[:, step - 1].float().cpu())
        opt.append(history.optimal_actions[:, step - 1].float().cpu())
        params_at_x = task.params_at_context(envs, history.contexts[:, step - 1])
        if params_at_x is not None:
            at_x.append(params_at_x.float().cpu())
        if keep_history:
            hists.append(history.to("cpu"))
    params, names, labels = split_envs(envs_all)
    history = None
    if keep_history:  # the environments as drawn (a history's own envs hold each episode's final state)
        history = History.cat(hists)
        history.envs = {k: v.cpu() for k, v in envs_all.items()}
    demand = torch.cat(at_x) if at_x else None
    return Collected(
        torch.cat(hidden, dim=1),
        step,
        torch.cat(opt),
        torch.cat(pred),
        params,
        names,
        labels,
        history,
        demand,
        task.hidden_type,
    )
