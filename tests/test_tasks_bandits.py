"""The bandit tasks (multi-armed and linear) against hand-computed cases, and end to end through the
rollout, the GPT policy, one training step and ``omgpt evaluate``."""

from __future__ import annotations

import json
import math

import lightning as L
import pytest
import torch

from omgpt.datamodules.history import HistoryDataModule, HistoryStream
from omgpt.commands.cli import cli_main
from omgpt.errors import OMGPTError
from omgpt.model import GPT, ModelConfig
from omgpt.module import OMGPTModule
from omgpt.policies import make_policy
from omgpt.rollout import rollout
from omgpt.tasks import make_task


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def repeat(envs: dict, n: int) -> dict:
    """``n`` copies of a one-environment batch."""
    return {k: v.expand(n, *v.shape[1:]).clone() for k, v in envs.items()}


def arm(index: list[int], k: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(index), k).float()


def no_context(n: int) -> torch.Tensor:
    return torch.zeros(n, 0)


# --------------------------------------------------------------------------------------------------
# Multi-armed bandit: closed forms
def mab_case():
    task = make_task("mab", n_arms=5)
    envs = {"r": torch.tensor([[0.3, -1.0, 2.0, 0.5, 1.5], [-0.2, -0.1, -3.0, -0.4, -0.15]])}
    return task, envs


def test_mab_shapes_and_declarations():
    task = make_task("mab")
    assert (task.n_arms, task.action_dim, task.context_dim, task.obs_dim, task.feature_dim) == (20, 20, 0, 1, 1)
    assert task.discrete and task.loss == "ce" and task.horizon == 100
    assert task.benchmarks == ("ucb", "ts")
    s = task.scaling()  # logits and one-hot tokens are never rescaled
    assert s.action_loc == (0.0,) * 20 and s.action_scale == (1.0,) * 20
    envs = task.sample_envs(7, gen(0))
    assert envs["r"].shape == (7, 20)
    assert task.sample_context(envs, 0, gen(1)).shape == (7, 0)
    with pytest.raises(OMGPTError, match="n_arms"):
        make_task("mab", n_arms=1)


def test_mab_optimal_arm_rewards_and_gap_by_hand():
    task, envs = mab_case()
    x = no_context(2)
    torch.testing.assert_close(task.optimal_action(envs, x, 0), arm([2, 1], 5), rtol=0, atol=0)
    a = arm([4, 3], 5)
    torch.testing.assert_close(task.expected_reward(envs, x, a, 0), torch.tensor([1.5, -0.4]))
    # r_{a*} - r_a: 2.0 - 1.5 = 0.5;  -0.1 - (-0.4) = 0.3.
    torch.testing.assert_close(task.regret(envs, x, a, 0), torch.tensor([0.5, 0.3]))
    torch.testing.assert_close(task.suboptimality(envs, x, a, 0), torch.tensor([0.5, 0.3]))
    a_star = task.optimal_action(envs, x, 0)
    assert torch.equal(task.regret(envs, x, a_star, 0), torch.zeros(2))
    # The worst arm: 2.0 - (-1.0) = 3;  -0.1 - (-3.0) = 2.9.
    torch.testing.assert_close(task.suboptimality(envs, x, arm([1, 2], 5), 0), torch.tensor([3.0, 2.9]))


def test_mab_prior_is_standard_normal_iid():
    r = make_task("mab").sample_envs(20_000, gen(0))["r"].double()
    assert abs(r.mean().item()) < 0.01
    assert r.var().item() == pytest.approx(1.0, rel=0.02)
    corr = torch.corrcoef(r.T) - torch.eye(20, dtype=torch.double)
    assert corr.abs().max() < 0.04  # independent arms
    # Arms are exchangeable: the best arm is uniform over the 20.
    counts = torch.bincount(r.argmax(-1), minlength=20).double()
    assert counts.min() > 0.8 * 1000 and counts.max() < 1.2 * 1000


@pytest.mark.parametrize("noise_std", [None, 0.5])
def test_mab_reward_noise_has_the_stated_standard_deviation(noise_std):
    task, envs = mab_case()
    task = make_task("mab", n_arms=5) if noise_std is None else make_task("mab", n_arms=5, noise_std=noise_std)
    noise_std = noise_std or 0.2  # the default is the authors' standard deviation 0.2 (docs/paper-gaps.md §6)
    n = 100_000
    one = repeat({"r": envs["r"][:1]}, n)
    o = task.observe(one, no_context(n), arm([4] * n, 5), 0, gen(4))
    assert o.shape == (n, 1)
    noise = o[:, 0].double() - 1.5
    assert abs(noise.mean().item()) < 0.01
    assert noise.std().item() == pytest.approx(noise_std, rel=0.01)


# --------------------------------------------------------------------------------------------------
# Multi-armed bandit: the discrete-action hooks
def test_mab_projection_is_the_identity_on_arms_and_rounds_anything_else():
    task = make_task("mab")
    eye = torch.eye(20)
    assert torch.equal(task.project(eye), eye)
    assert torch.equal(task.project(eye, no_context(20)), eye)
    mixed = torch.tensor([[0.1, 0.7, 0.2] + [0.0] * 17, [-3.0] * 19 + [-1.0]])
    torch.testing.assert_close(task.project(mixed), arm([1, 19], 20), rtol=0, atol=0)


def test_mab_perturb_shifts_the_arm_by_one_or_two_only_where_noisy():
    task = make_task("mab")
    n = 8000
    g = gen(5)
    index = torch.randint(2, 18, (n,), generator=g)  # interior arms: no clamping
    noisy = torch.rand(n, 1, generator=g) < 0.5
    out = task.perturb(task.one_hot(index), noisy, g)
    assert torch.equal(out.sum(-1), torch.ones(n)) and set(out.unique().tolist()) == {0.0, 1.0}  # one-hot
    shift = out.argmax(-1) - index
    assert torch.equal(shift[~noisy[:, 0]], torch.zeros(int((~noisy).sum()), dtype=torch.long))
    counts = {s: int((shift[noisy[:, 0]] == s).sum()) for s in (-2, -1, 0, 1, 2)}
    assert counts[0] == 0 and sum(counts.values()) == int(noisy.sum())  # nothing else occurs
    for s in (-2, -1, 1, 2):  # U{-2,-1,1,2}: a quarter each
        assert abs(counts[s] / noisy.sum().item() - 0.25) < 0.03


def test_mab_perturb_clamps_at_the_end_arms():
    task = make_task("mab")
    n = 4000
    g = gen(6)
    all_noisy = torch.ones(n, 1, dtype=torch.bool)
    first = task.perturb(task.one_hot(torch.zeros(n, dtype=torch.long)), all_noisy, g).argmax(-1)
    last = task.perturb(task.one_hot(torch.full((n,), 19)), all_noisy, g).argmax(-1)
    # Shifts -2/-1 from arm 0 clamp to arm 0; +1/+2 from arm 19 clamp to arm 19 (no wrap-around).
    assert set(first.tolist()) == {0, 1, 2} and set(last.tolist()) == {17, 18, 19}
    assert abs((first == 0).float().mean().item() - 0.5) < 0.04
    assert abs((last == 19).float().mean().item() - 0.5) < 0.04


def test_mab_perturb_scale_widens_the_shift():
    task = make_task("mab")
    n = 4000
    index = torch.full((n,), 10)
    out = task.perturb(task.one_hot(index), torch.ones(n, 1, dtype=torch.bool), gen(7), scale=2.0)
    assert set((out.argmax(-1) - index).tolist()) == {-4, -3, -2, -1, 1, 2, 3, 4}


def test_mab_random_action_is_a_uniform_arm():
    task = make_task("mab")
    n = 40_000
    a = task.sample_action(n, gen(8))
    assert a.shape == (n, 20) and torch.equal(a.sum(-1), torch.ones(n))
    counts = a.sum(0).double()
    expected = n / 20
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 43.8  # the 99.9% quantile of chi-square with 19 degrees of freedom
    assert counts.min() > 0


def test_mab_action_from_output_samples_the_softmax_and_greedy_takes_the_argmax():
    task = make_task("mab", n_arms=4)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    n = 40_000
    logits = (probs.log() + 1.7).expand(n, 4)  # softmax is shift-invariant
    a = task.action_from_output(logits, gen(9))
    assert torch.equal(a.sum(-1), torch.ones(n))
    freq = a.mean(0)
    assert (freq - probs).abs().max() < 0.01
    # The same generator seed replays the same draws; another seed does not.
    assert torch.equal(task.action_from_output(logits, gen(9)), a)
    assert not torch.equal(task.action_from_output(logits, gen(10)), a)
    rows = torch.tensor([[0.0, 3.0, 1.0, 2.0], [5.0, -1.0, 4.9, 0.0]])
    torch.testing.assert_close(task.action_from_output(rows, gen(0), greedy=True), arm([1, 0], 4), rtol=0, atol=0)
    torch.testing.assert_close(task.action_from_output(rows, None, greedy=True), arm([1, 0], 4), rtol=0, atol=0)


# --------------------------------------------------------------------------------------------------
# Linear bandit
def test_linear_bandit_shapes_and_declarations():
    task = make_task("linear-bandit")
    assert (task.dim, task.action_dim, task.context_dim, task.feature_dim) == (2, 2, 0, 1)
    assert not task.discrete and task.loss == "l1" and (task.action_low, task.action_high) == (-1.0, 1.0)
    assert task.benchmarks == ("linucb", "lints")
    assert make_task("linear-bandit", dim=5).action_dim == 5


def test_linear_bandit_optimum_rewards_and_regret_by_hand():
    task = make_task("linear-bandit")
    envs = {"w": torch.tensor([[0.6, 0.8], [1.0, 0.0]])}
    x = no_context(2)
    torch.testing.assert_close(task.optimal_action(envs, x, 0), envs["w"], rtol=0, atol=0)
    a = torch.tensor([[0.0, 1.0], [-0.5, 0.5]])
    torch.testing.assert_close(task.expected_reward(envs, x, a, 0), torch.tensor([0.8, -0.5]))
    # 1 - wᵀa: 0.2, 1.5;  ‖w - a‖: √(0.36 + 0.04), √(2.25 + 0.25).
    torch.testing.assert_close(task.regret(envs, x, a, 0), torch.tensor([0.2, 1.5]))
    torch.testing.assert_close(task.suboptimality(envs, x, a, 0), torch.tensor([math.sqrt(0.4), math.sqrt(2.5)]))


def test_linear_bandit_optimum_beats_every_action_of_the_ball():
    task = make_task("linear-bandit")
    g = gen(11)
    envs = task.sample_envs(32, g)
    x = no_context(32)
    best = task.expected_reward(envs, x, task.optimal_action(envs, x, 0), 0)
    torch.testing.assert_close(best, torch.ones(32))  # ‖w‖ = 1
    for _ in range(20):
        assert (task.expected_reward(envs, x, task.sample_action(32, g), 0) <= best + 1e-6).all()


@pytest.mark.parametrize("dim", [2, 3])
def test_linear_bandit_prior_is_uniform_on_the_sphere(dim):
    w = make_task("linear-bandit", dim=dim).sample_envs(40_000, gen(12))["w"].double()
    torch.testing.assert_close(torch.linalg.vector_norm(w, dim=-1), torch.ones(40_000, dtype=torch.double))
    assert w.mean(0).abs().max() < 0.015
    second = w.T @ w / w.shape[0]  # E[w wᵀ] = I/d for the uniform distribution
    assert (second - torch.eye(dim, dtype=torch.double) / dim).abs().max() < 0.01
    if dim == 2:  # the angle is uniform on (-π, π]
        angle = torch.atan2(w[:, 1], w[:, 0])
        counts = torch.histc(angle, bins=8, min=-math.pi, max=math.pi)
        assert (counts / 5000 - 1).abs().max() < 0.06


def test_linear_bandit_reward_noise_has_the_stated_standard_deviation():
    task = make_task("linear-bandit")
    n = 100_000
    envs = repeat({"w": torch.tensor([[0.6, 0.8]])}, n)
    a = torch.tensor([[0.5, 0.5]]).expand(n, 2)
    noise = task.observe(envs, no_context(n), a, 0, gen(13))[:, 0].double() - 0.7
    assert abs(noise.mean().item()) < 0.01
    assert noise.std().item() == pytest.approx(
        0.2, rel=0.01
    )  # the default is a standard deviation (docs/paper-gaps.md §6)


def test_linear_bandit_projection_onto_the_unit_ball():
    task = make_task("linear-bandit")
    a = torch.tensor([[0.3, -0.4], [3.0, 4.0], [0.0, 0.0], [-2.0, 0.0], [0.6, 0.8]])
    expected = torch.tensor([[0.3, -0.4], [0.6, 0.8], [0.0, 0.0], [-1.0, 0.0], [0.6, 0.8]])
    torch.testing.assert_close(task.project(a), expected, rtol=0, atol=1e-7)
    assert torch.equal(task.project(a[:1]), a[:1])  # inside: untouched
    # Projection onto a convex set is idempotent, and [-1, 1]^2 corners land on the circle.
    torch.testing.assert_close(task.project(task.project(a)), task.project(a))
    corner = task.project(torch.tensor([[1.0, 1.0]]))
    torch.testing.assert_close(corner, torch.full((1, 2), 1 / math.sqrt(2)))


def test_linear_bandit_random_action_is_uniform_in_the_ball():
    task = make_task("linear-bandit")
    n = 40_000
    a = task.sample_action(n, gen(14)).double()
    norm = torch.linalg.vector_norm(a, dim=-1)
    assert a.shape == (n, 2) and (norm <= 1 + 1e-6).all()
    assert a.mean(0).abs().max() < 0.01
    # Area fraction: P(‖a‖ <= ρ) = ρ².
    for rho in (0.25, 0.5, 0.9):
        assert abs((norm <= rho).double().mean().item() - rho**2) < 0.01


# --------------------------------------------------------------------------------------------------
# Rollouts
BANDITS = ["mab", "linear-bandit"]


@pytest.mark.parametrize("name", BANDITS)
def test_oracle_zero_regret_noisy_oracle_and_random_positive(name):
    task = make_task(name)
    envs = task.sample_envs(64, gen(0))
    oracle = rollout(task, envs, make_policy("oracle", task), 30, gen(1), gen(2))
    assert oracle.contexts.shape == (64, 30, 0) and oracle.features().shape == (64, 30, 1)
    assert torch.equal(oracle.regrets, torch.zeros(64, 30))
    assert torch.equal(oracle.suboptimality, torch.zeros(64, 30))
    assert torch.equal(oracle.actions, oracle.optimal_actions)

    noisy = rollout(task, envs, make_policy("noisy-oracle", task), 30, gen(1), gen(2))
    random = rollout(task, envs, make_policy("random", task), 30, gen(1), gen(2))
    for h in (noisy, random):
        assert h.regrets.sum() > 0 and h.regrets.min() >= -1e-6
    assert noisy.regrets.sum() < random.regrets.sum()
    # ε' = 0 w.p. max(0, 1 - 2/√t): always noisy for t <= 4, mostly exact late on.
    late, early = (noisy.suboptimality[:, 20:] > 0).float().mean(), (noisy.suboptimality[:, :4] > 0).float().mean()
    assert late < 0.6
    if name == "mab":
        assert torch.equal(noisy.actions.sum(-1), torch.ones(64, 30))  # always one arm
        shift = noisy.actions.argmax(-1) - noisy.optimal_actions.argmax(-1)
        assert shift.abs().max() <= 2
        assert early > 0.85  # noisy, except a clamped shift at an end arm
        torch.testing.assert_close(noisy.suboptimality, noisy.regrets, rtol=0, atol=0)  # the reward gap
    else:
        assert (torch.linalg.vector_norm(noisy.actions, dim=-1) <= 1 + 1e-6).all()  # projected onto A
        assert (noisy.suboptimality <= math.sqrt(2) + 1e-5).all()  # ‖ε'‖ <= √2 before projection
        assert early > 0.95
    # The reward observed is that of the arm played, with the same noise for every policy.
    torch.testing.assert_close(
        noisy.observations - random.observations,
        (envs["w" if name == "linear-bandit" else "r"][:, None] * (noisy.actions - random.actions)).sum(
            -1, keepdim=True
        ),
        rtol=0,
        atol=1e-5,
    )


def tiny_gpt(task, seed: int = 0, std: float = 0.2) -> GPT:
    """Weights redrawn with std 0.2 so the logits depend strongly on the history (with GPT-2's 0.02
    they are nearly constant and a broken cache could go unnoticed)."""
    torch.manual_seed(seed)
    model = GPT(
        ModelConfig(
            feature_dim=task.feature_dim, action_dim=task.action_dim, n_layer=2, n_head=2, n_embd=16, max_steps=30
        ),
        task.scaling(),
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
    return model


def test_gpt_plays_the_bandit_with_and_without_the_cache():
    task = make_task("mab")
    model = tiny_gpt(task)
    envs = task.sample_envs(16, gen(0))

    def play(**options):
        return rollout(task, envs, make_policy("omgpt", task, model=model, **options), 30, gen(1), gen(2))

    greedy, greedy_ref = play(greedy=True), play(greedy=True, use_cache=False)
    assert torch.equal(greedy.actions, greedy_ref.actions)
    assert torch.equal(greedy.actions.sum(-1), torch.ones(16, 30))
    # Greedy play is the argmax of the teacher-forced logits on the history it produced.
    logits = model(*greedy.tokens())
    assert torch.equal(logits.argmax(-1), greedy.actions.argmax(-1))
    assert greedy.actions.argmax(-1).unique().numel() > 1  # the decisions depend on the history

    sampled, sampled_ref = play(), play(use_cache=False)  # the same policy generator seed
    assert torch.equal(sampled.actions, sampled_ref.actions)
    assert not torch.equal(sampled.actions, greedy.actions)
    assert torch.equal(sampled.actions.sum(-1), torch.ones(16, 30))
    # A freshly initialised (GPT-2 init) model samples nearly uniformly: every arm gets played.
    fresh = GPT(
        ModelConfig(
            feature_dim=task.feature_dim, action_dim=task.action_dim, n_layer=2, n_head=2, n_embd=16, max_steps=30
        )
    )
    h = rollout(task, envs, make_policy("omgpt", task, model=fresh), 30, gen(1), gen(2))
    assert h.actions.argmax(-1).unique().numel() == 20


def test_one_training_step_on_noisy_oracle_histories_gives_a_finite_ce_loss():
    torch.manual_seed(0)
    module = OMGPTModule(
        task="mab",
        horizon=20,
        network=dict(n_layer=2, n_head=2, n_embd=16),
    )
    batch = next(iter(HistoryStream(module.task, batch_size=8, n_batches=1, horizon=20, seed=0, epoch=0, rank=0)))
    assert batch["features"].shape == (8, 20, 1) and batch["actions"].shape == (8, 20, 20)
    assert torch.equal(batch["targets"].sum(-1), torch.ones(8, 20))
    module.train()
    opt = torch.optim.AdamW(module.model.optimizer_groups(0.0), lr=1e-2)
    loss = module.loss(module.model(batch["features"], batch["actions"]), batch["targets"])
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(math.log(20), abs=0.1)  # near-uniform logits at initialisation
    # It is the cross-entropy against the optimal arm.
    pred = module.model(batch["features"], batch["actions"])
    by_hand = -(torch.log_softmax(pred, -1) * batch["targets"]).sum(-1).mean()
    torch.testing.assert_close(module.loss(pred, batch["targets"]), by_hand)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in module.model.parameters() if p.grad is not None)
    opt.step()
    module.eval()  # no dropout: compare the same function before and after
    with torch.no_grad():
        after = module.loss(module.model(batch["features"], batch["actions"]), batch["targets"])
    assert torch.isfinite(after) and after < loss


def test_lightning_fit_and_online_validation_on_the_bandit(tmp_path):
    L.seed_everything(0, verbose=False)
    module = OMGPTModule(
        task="mab",
        horizon=10,
        network=dict(n_layer=2, n_head=2, n_embd=16),
    )
    data = HistoryDataModule(
        task="mab", horizon=10, batch_size=4, batches_per_epoch=2, chunk=2, val_runs=4, val_batch_size=4
    )
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        reload_dataloaders_every_n_epochs=1,
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, datamodule=data)
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["train/loss"]) and metrics["val/regret"] > 0


@pytest.mark.parametrize("name", BANDITS)
def test_evaluate_command_on_the_bandits(name, tmp_path):
    out = tmp_path / name
    args = [
        "evaluate",
        "--task",
        name,
        "--policies",
        "oracle,noisy-oracle,random",
        "--runs",
        "8",
        "--horizon",
        "20",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli_main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    final = {p: s["final_regret"]["mean"] for p, s in summary["policies"].items()}
    assert final["oracle"] == 0.0
    assert 0 < final["noisy-oracle"] < final["random"]
    # the curves: one row per policy and step, the last step's mean the summary's final regret
    import csv

    import matplotlib.image

    rows = list(csv.DictReader((out / "curves.csv").open()))
    assert {r["policy"] for r in rows} == set(final) and len(rows) == 20 * len(final)
    for name, regret in final.items():
        last = [r for r in rows if r["policy"] == name and r["step"] == "20"]
        assert float(last[0]["regret_mean"]) == pytest.approx(regret, abs=1e-4)
    image = matplotlib.image.imread(out / "regret.png")  # a drawn figure, not an empty file
    assert image.shape[0] > 100 and image.shape[1] > 100 and image[..., :3].std() > 0.01
