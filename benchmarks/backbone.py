"""Our training step side by side with the authors' backbone, ``transformers``' GPT-2, at the demo's size.

    pip install -e ".[bench]"     # transformers: a benchmark extra, never a runtime dependency
    python benchmarks/backbone.py [--quick] [--steps 30] [--repeats 3] [--batch 64] [--horizon 50] [--no-decode]

The paper's model is a GPT-2 (``transformers.GPT2Model``) over the two-token layout: each history
step is a feature token ``(O_{t-1}, X_t)`` and an action token ``a_t``, ``2T`` tokens, ``a*_t`` read
out at every feature token (docs/paper-gaps.md §1, :mod:`omgpt.model`). Here, on one thread, with the
demo's network (``configs/demo.yaml``: 4 layers, 64 dims, its heads -- RESULTS.md's figures were measured
at 4 --, no dropout) and histories (newsvendor, batch 64, T = 50):

* ``ours paper``: :class:`omgpt.model.GPT` in the same two-token layout -- the like-for-like arm;
* ``ours transition``: the layout the demo trains (one token per step, ``configs/demo.yaml``);
* ``GPT2Model``: ``transformers``' GPT-2 with the same layers, width, heads and positions, fed our
  embedded two-token sequence (``inputs_embeds``) and read out by our head; its default attention
  implementation (SDPA in recent versions, as ours).

Every arm trains the same step -- embeddings, backbone, read-out, the task's loss, backward, AdamW --
on the same pre-generated batch; the arms alternate ``--repeats`` times and each keeps its best
median, so the ratios come from this one run. Times are this process's CPU seconds (one thread: what
the step costs, whatever else the machine runs; wall-clock on a shared machine swung the ratio from
0.8x to 1.2x between runs).
Decisions per second = ``B·T / seconds per step`` (what every layout has in common). Inference: the
same for a rollout's decoding with the KV cache (ours: :meth:`SequenceModel.decode`; GPT-2:
``past_key_values``), one step's new tokens at a time over ``T`` steps, teacher-forced on the batch.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings

import torch
from torch import nn

from omgpt.datamodules.history import HistoryStream
from omgpt.module import OMGPTModule
from omgpt.timing import demo_config, machine
from omgpt.entry import Integer, entry_point, script_parser

try:
    import transformers
    from transformers import GPT2Config, GPT2Model
except ImportError:
    transformers = None


class HFTwoToken(nn.Module):
    """``GPT2Model`` over our model's two-token sequence: our embeddings and read-out around it."""

    def __init__(self, ours, horizon: int):
        super().__init__()
        cfg = ours.cfg
        self.ours = ours  # its embeddings and head only (its blocks are not called)
        self.gpt2 = GPT2Model(
            GPT2Config(
                n_layer=cfg.n_layer,
                n_head=cfg.n_head,
                n_embd=cfg.n_embd,
                n_positions=2 * horizon,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                vocab_size=1,
                bos_token_id=None,
                eos_token_id=None,
            )
        )  # no vocabulary: fed embeddings

    def forward(self, features, actions):
        hidden = self.gpt2(inputs_embeds=self.ours.tokens(features, actions)).last_hidden_state
        return self.ours.action_head(hidden[:, 0::2]) * self.ours.action_scale + self.ours.action_loc

    @torch.no_grad()
    def decode_all(self, features, actions):
        past = None
        for t in range(features.shape[1]):
            f = self.ours.embed_features(features[:, t])[:, None]
            tokens = f if t == 0 else torch.cat([self.ours.embed_actions(actions[:, t - 1])[:, None], f], dim=1)
            with warnings.catch_warnings():  # transformers 5.x renames past_key_values to cache; both versions take it
                warnings.simplefilter("ignore", FutureWarning)
                out = self.gpt2(inputs_embeds=tokens, past_key_values=past, use_cache=True)
            past = out.past_key_values
            self.ours.action_head(out.last_hidden_state[:, -1])


@torch.no_grad()
def decode_ours(model, features, actions):
    model.start_cache(features.shape[0], features.shape[1])
    try:
        for t in range(features.shape[1]):
            prev = (actions[:, t - 1], features[:, t - 1]) if t else (None, None)
            model.decode(t, features[:, t], *prev)
    finally:
        model.clear_cache()


def train_seconds(net, module, batch, steps: int) -> float:
    """Median CPU seconds of one training step after three warm-up steps."""
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    times = []
    for i in range(steps + 3):
        start = time.process_time()
        loss = module.loss(net(batch["features"], batch["actions"]), batch["targets"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= 3:
            times.append(time.process_time() - start)
    return statistics.median(times)


def decode_seconds(decode, batch, repeats: int = 3) -> float:
    decode(batch["features"], batch["actions"])  # warm-up
    times = []
    for _ in range(repeats):
        start = time.process_time()
        decode(batch["features"], batch["actions"])
        times.append(time.process_time() - start)
    return statistics.median(times)


@entry_point
def main(argv: list[str] | None = None) -> dict:
    p = script_parser(__file__, __doc__)
    p.add_argument("--quick", action="store_true", help="10 steps, one repeat")
    p.add_argument("--steps", type=Integer(1, 1_000_000), default=30)
    p.add_argument("--repeats", type=Integer(1, 1000), default=3)
    p.add_argument("--batch", type=Integer(1, 1_000_000), default=64)
    p.add_argument("--horizon", type=Integer(1, 100_000), default=50)
    p.add_argument("--no-decode", action="store_true", help="skip the KV-cached decoding")
    a = p.parse_args(argv)
    if transformers is None:
        sys.exit(
            'benchmarks/backbone.py needs transformers: pip install -e ".[bench]" (or pip install "transformers>=4.40")'
        )
    steps, repeats = (10, 1) if a.quick else (a.steps, a.repeats)
    torch.set_num_threads(1)
    cfg = demo_config()["model"]
    arms = {}
    for name, layout in (("ours paper", "paper"), ("ours transition", "transition"), ("GPT2Model", "paper")):
        torch.manual_seed(0)
        module = OMGPTModule(**{**cfg, "horizon": a.horizon, "network": {**cfg["network"], "layout": layout}}).train()
        net = HFTwoToken(module.model, a.horizon).train() if name == "GPT2Model" else module.model
        arms[name] = (module, net)
    task = arms["ours paper"][0].task
    batch = next(iter(HistoryStream(task, batch_size=a.batch, n_batches=1, horizon=a.horizon, seed=0, epoch=0, rank=0)))
    hf = arms["GPT2Model"][1]
    print(
        f"{machine()}; 1 thread; transformers {transformers.__version__} (GPT-2 attention: {hf.gpt2.config._attn_implementation})"
    )
    ours_backbone = sum(
        p.numel() for n, p in arms["ours paper"][1].named_parameters() if n.startswith(("blocks.", "pos_emb.", "ln_f."))
    )
    print(
        f"demo network {cfg['network']['n_layer']} layers x {cfg['network']['n_embd']} dims, {cfg['network']['n_head']} heads; batch {a.batch}, T = {a.horizon}; "
        f"backbone parameters: ours {ours_backbone:,}, GPT2Model {sum(p.numel() for p in hf.gpt2.parameters()):,} (its one-word vocabulary unused)"
    )
    train, decode = {n: float("inf") for n in arms}, {n: float("inf") for n in arms}
    for _ in range(repeats):
        for name, (module, net) in arms.items():
            train[name] = min(train[name], train_seconds(net, module, batch, steps))
            if not a.no_decode:
                net.eval()
                decode[name] = min(
                    decode[name],
                    decode_seconds(
                        hf.decode_all if name == "GPT2Model" else lambda f, x: decode_ours(net, f, x), batch
                    ),
                )
                net.train()
    decisions = a.batch * a.horizon
    print(
        f"\n{'arm':<17}{'train decisions/s':>19}{'vs GPT2Model':>14}"
        + ("" if a.no_decode else f"{'decode decisions/s':>20}{'vs GPT2Model':>14}")
    )
    for name in arms:
        row = f"{name:<17}{decisions / train[name]:19.0f}{train['GPT2Model'] / train[name]:13.2f}x"
        if not a.no_decode:
            row += f"{decisions / decode[name]:20.0f}{decode['GPT2Model'] / decode[name]:13.2f}x"
        print(row)
    return {"train_s": train, "decode_s": decode}


if __name__ == "__main__":
    sys.exit(main())
