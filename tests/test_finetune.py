"""Fine-tuning on regret (OMGPTModule's ``objective: regret``, docs/finetune.md): the pathwise gradient
is the derivative of the rollout's regret (finite differences, float64), the score-function estimator
is unbiased (a two-armed bandit whose gradient is known in closed form), the trust region holds, the
fine-tuned checkpoint plays like any other, and a fine-tuning run killed with SIGKILL resumes exactly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from omgpt.errors import OMGPTError
from omgpt.model import load_model
from omgpt.module import OMGPTModule


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def regret_module(lr: float | None = None, **finetune) -> OMGPTModule:
    """A tiny linear-bandit module fine-tuned on regret; ``finetune`` overrides model.finetune's settings."""
    return OMGPTModule(
        task="linear-bandit",
        horizon=5,
        network=dict(n_layer=1, n_head=2, n_embd=8, dropout=0.0),
        optim={} if lr is None else {"lr": lr},
        finetune={"objective": "regret", "rollout_envs": 3, **finetune},
    )


def test_the_pathwise_gradient_is_the_derivative_of_the_rollouts_regret(float64):
    """A tiny GPT plays 5 steps of the linear bandit; the autograd derivative of the mean cumulative
    regret along a random direction of the weights matches a central finite difference of the same
    rollout (same environments and noise: the objective's seeds depend on the step only). The myopic
    gradient (no path through the observations) misses it: the match needs the path from an action
    through the observation it produced into later decisions, the value of exploration."""
    torch.manual_seed(0)
    module = regret_module(feedback_grad=1.0)
    with torch.no_grad():  # weights large enough that later actions depend on the observations
        for p in module.model.parameters():
            p.normal_(0, 0.5)
    params = list(module.model.parameters())
    assert params[0].dtype == torch.float64

    def gradient(feedback: float) -> torch.Tensor:
        module.finetune = dataclasses.replace(module.finetune, feedback_grad=feedback)
        loss, _ = module.regret_loss()
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])

    direction = torch.randn(sum(p.numel() for p in params))
    direction /= direction.norm()
    full, myopic = gradient(1.0) @ direction, gradient(0.0) @ direction

    def regret_at(step: float) -> float:
        with torch.no_grad():
            offsets = direction.split([p.numel() for p in params])
            for p, d in zip(params, offsets):
                p.add_(step * d.view_as(p))
            value = float(module.regret_loss()[1])
            for p, d in zip(params, offsets):
                p.sub_(step * d.view_as(p))
            return value

    eps = 1e-5
    finite = (regret_at(eps) - regret_at(-eps)) / (2 * eps)
    assert float(full) == pytest.approx(finite, rel=1e-6, abs=1e-9)
    assert abs(float(myopic) - finite) > 1e-3 * abs(finite)  # the check can tell the paths apart


def test_the_score_function_estimator_is_unbiased_on_a_two_armed_bandit():
    """A GPT whose weights are all zero but the read-out's bias plays a fixed softmax ``p`` over two arms,
    whatever it has seen: over ``T`` steps of a one-environment pool its expected cumulative regret is
    ``T Σ_k p_k Δ_k`` (``Δ_k`` the arm's gap), whose gradient in the bias is ``T Σ_k Δ_k p_k (1{k=j} - p_j)``.
    The module's REINFORCE estimate (groups on common random numbers, leave-one-out baseline, log-
    probabilities from the teacher-forced pass), averaged over 200 independent steps, matches it."""
    T = 5
    module = OMGPTModule(task="mab", task_options={"n_arms": 2, "pool_size": 1}, horizon=T, network=dict(n_layer=1, n_head=2, n_embd=8, dropout=0.0), finetune=dict(objective="regret", estimator="score", rollout_envs=64, group_size=2))  # fmt: skip
    bias = torch.tensor([0.0, 0.7])
    with torch.no_grad():
        for p in module.model.parameters():
            p.zero_()
        module.model.action_head.bias.copy_(bias)
    means = module.task.pool["r"][0]
    gaps = means.max() - means
    p = torch.softmax(bias, 0)
    known = T * (gaps * p) @ (torch.eye(2) - p[None, :])  # d/d bias_j of T Σ_k p_k Δ_k

    estimates = []
    for seed in range(200):
        torch.manual_seed(seed)  # the objective's environments and noise come from the fit's seed
        module.model.zero_grad()
        module.regret_loss()[0].backward()
        estimates.append(module.model.action_head.bias.grad.clone())
    estimates = torch.stack(estimates)
    mean, se = estimates.mean(0), estimates.std(0) / len(estimates) ** 0.5
    assert (known.abs() > 10 * se).all()  # a gradient the test can resolve
    assert ((mean - known).abs() < 4 * se).all(), (mean, known, se)


def test_the_trust_region_keeps_the_fine_tuned_weights_within_their_bound(tmp_path):
    """A few fine-tuning steps at a learning rate that would carry the weights far away end exactly on
    the ball ``‖θ - θ₀‖ = trust_radius · ‖θ₀‖`` (the bound binds, and holds); the checkpoint loads with
    ``load_model`` and plays like any other; without the bound the same steps leave the ball."""
    import lightning as L

    from omgpt.datamodules import HistoryDataModule
    from omgpt.policies import make_policy
    from omgpt.rollout import rollout

    supervised = regret_module(objective="imitation")
    init = tmp_path / "supervised.ckpt"
    torch.save({"hyper_parameters": dict(supervised.hparams), "state_dict": supervised.state_dict()}, init)

    def fine_tune(radius):
        torch.manual_seed(0)
        module = regret_module(init_from=str(init), trust_radius=radius, lr=0.05)
        data = HistoryDataModule(
            task="linear-bandit", horizon=5, batch_size=4, batches_per_epoch=4, val_runs=4, val_batch_size=4
        )
        trainer = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                            default_root_dir=tmp_path, accelerator="cpu", reload_dataloaders_every_n_epochs=1)  # fmt: skip
        trainer.fit(module, data)
        return module, trainer

    bounded, trainer = fine_tune(0.02)
    assert float(bounded.trust_distance()) == pytest.approx(0.02, rel=1e-4)
    free, _ = fine_tune(None)
    assert float(free.trust_distance()) > 0.05
    saved = tmp_path / "finetuned.ckpt"
    trainer.save_checkpoint(saved)
    model, task, hparams = load_model(saved)
    assert hparams["finetune"]["objective"] == "regret"
    history = rollout(task, task.sample_envs(3, torch.Generator().manual_seed(1)), make_policy("omgpt", task, model=model), 5,
                      torch.Generator().manual_seed(2))  # fmt: skip
    assert torch.isfinite(history.regrets).all()


def test_bad_fine_tuning_settings_are_one_line():
    with pytest.raises(OMGPTError, match="discrete actions"):
        OMGPTModule(task="mab", horizon=5, finetune={"objective": "regret", "estimator": "pathwise"})
    with pytest.raises(OMGPTError, match="init_from"):
        regret_module(trust_radius=0.1)
    with pytest.raises(OMGPTError, match="objective"):
        regret_module(objective="reward")
    with pytest.raises(OMGPTError, match="group_size"):
        regret_module(group_size=1)
    with pytest.raises(OMGPTError, match="model.finetune has settings this version does not take: lr"):
        OMGPTModule(task="linear-bandit", horizon=5, finetune={"lr": 0.1})  # an optimiser setting in the wrong group


def test_init_from_a_model_of_other_settings_is_one_line(tmp_path):
    other = OMGPTModule(
        task="linear-bandit",
        horizon=5,
        network=dict(n_layer=1, n_head=2, n_embd=8, layout="compact"),
    )
    path = tmp_path / "other.ckpt"
    torch.save({"hyper_parameters": dict(other.hparams), "state_dict": other.state_dict()}, path)
    module = regret_module(init_from=str(path))
    with pytest.raises(OMGPTError, match="layout"):
        module.setup("fit")


@pytest.mark.slow
def test_fine_tuning_killed_with_sigkill_resumes_exactly(tmp_path):
    """The tiny newsvendor fit of tests/test_resume.py as a regret fine-tuning run (with the trust
    region's both parts), SIGKILLed at step 2 (mid-epoch 0) and resumed from its last.ckpt: it ends at
    the uninterrupted run's weights, bit for bit, with the same validation metrics -- the rollouts'
    environments and noise, the optimizer and the anchor θ₀ all continue exactly."""
    from tests.test_resume import fit_command, kill_at, probe, start

    init = tmp_path / "supervised.ckpt"
    supervised = OMGPTModule(
        task="newsvendor",
        horizon=12,
        network=dict(n_layer=2, n_head=2, n_embd=16, dropout=0.05),
    )
    torch.save({"hyper_parameters": dict(supervised.hparams), "state_dict": supervised.state_dict()}, init)
    finetune = ("--model.finetune.objective", "regret", "--model.finetune.init_from", str(init), "--model.finetune.rollout_envs", "4",
                "--model.finetune.trust_radius", "0.05", "--model.finetune.imitation_weight", "0.5", "--model.optim.lr", "0.01")  # fmt: skip

    reference = start(fit_command(tmp_path, "reference", *finetune), tmp_path / "reference.log")
    killed = kill_at(tmp_path, "killed", 2, *finetune)
    ckpt = torch.load(killed, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 2 and ckpt["hyper_parameters"]["finetune"]["objective"] == "regret"
    resumed = start(fit_command(tmp_path, "resumed", *finetune, "--ckpt_path", str(killed)), tmp_path / "resumed.log")
    for name, proc in (("reference", reference), ("resumed", resumed)):
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]

    ref, piece = probe(tmp_path, "reference"), probe(tmp_path, "resumed")
    assert piece["global_step"] == ref["global_step"] == 9
    assert piece["param_hash"] == ref["param_hash"]
    assert piece["val_logged"] == ref["val_logged"][-len(piece["val_logged"]) :]
    first = probe(tmp_path, "killed")
    assert first["param_hash"] != ref["param_hash"]  # the weights did move after step 2
    model, _, hparams = load_model(next((tmp_path / "resumed" / "runs").rglob("last.ckpt")))
    assert hparams["finetune"]["init_from"] == str(init)


def test_a_model_of_the_full_prior_starts_a_fit_on_a_pool_drawn_from_it(tmp_path):
    """Transfer (the lever study's ``transfer`` arm): the weights of a model of the whole prior load into a
    fit on a pool of it, or on another demand type -- the options that only choose which environments
    are drawn -- and its defaults spelt out are the same prior; an option that changes what a token
    holds (the context's dimension) is still refused in one line."""

    def module(options, **finetune):
        return OMGPTModule(
            task="pricing", task_options=options, horizon=5, network=dict(n_layer=1, n_head=2, n_embd=8),
            finetune=finetune,
        )  # fmt: skip

    parent = module({"dim": 6})
    path = tmp_path / "parent.ckpt"
    torch.save({"hyper_parameters": dict(parent.hparams), "state_dict": parent.state_dict()}, path)
    for options in ({"pool_size": 16}, {"pool_size": 16, "demand_types": "mixed"}, {}):
        child = module(options, init_from=str(path))
        child.setup("fit")
        assert all(torch.equal(a, b) for a, b in zip(child.model.parameters(), parent.model.parameters()))
    with pytest.raises(OMGPTError, match="task_options"):
        module({"dim": 4, "pool_size": 16}, init_from=str(path)).setup("fit")
