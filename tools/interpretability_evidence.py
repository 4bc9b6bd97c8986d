"""Make the figures and JSON of results/interpretability/ from the run of tools/interpretability_train.py (CPU, a few minutes):

    OMP_NUM_THREADS=1 .venv/bin/python -m tools.interpretability_evidence [RUN_DIR]

RUN_DIR defaults to runs/interpretability/version_0. Probes and t-SNE at the token of X_T, T the run's
horizon (100, as the paper's X_100), on two kinds of histories: ``omgpt`` (played by the model itself,
its test-time situation) and the run's pre-training data policy, read from RUN_DIR/config.yaml
(``random`` with prices uniform on [0, 3] in pricing_mixed.yaml). Equivalent CLI calls for the first kind:
``omgpt probe --ckpt RUN_DIR/checkpoints/last.ckpt --out DIR`` and ``omgpt tsne --ckpt … --out DIR``;
the training-OOD map is ``omgpt tsne-training --ckpt epoch000.ckpt --ckpt … --out DIR``.

References, on the same test histories (what a good estimator can get out of the history at all):

* ``bayes_known_type``: Bayesian linear regression of the observed demands on ``(X_s, -X_s·g(a_s))``
  (``g(a) = a`` or ``a²`` by the *true* type), Gaussian prior with the uniform prior's mean and
  variance, the task's noise variance (``σ = 0.2``, ``σ² = 0.04``): posterior-mean parameters, the demand at ``X_t`` they imply,
  and the plug-in optimal price; normalised errors as the probes'.
* ``bayes_type``: the Bayes classifier of the demand type (marginal likelihoods of the two
  Gaussian linear models above), error normalised as the type probe's (1 = chance);
* ``alg_star``: the action of ``Alg*`` (posterior averaging over 4096 prior particles, type unknown)
  fed the same history -- the Bayes-optimal prediction of ``a*_t`` under squared loss.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import yaml

from omgpt.analysis.capture import Collected, collect
from omgpt.analysis.probing import normalised_mse, plot_probes, probe_collected
from omgpt.analysis.tsne import plot_training_ood, plot_tsne_layers, training_ood, tsne_layers
from omgpt.entry import InputFolder, Seed, entry_point, script_parser
from omgpt.files import write_json
from omgpt.model import load_model
from omgpt.policies import make_policy
from omgpt.seeding import EXPERIMENT_SEED, AnalysisPart, Stream, stream_seed

HERE = Path(__file__).resolve().parents[1] / "results" / "interpretability"  # where the evidence is written
# training-OOD checkpoints: early, just before the mixed phase (it starts at epoch 15), after it, last
OOD_EPOCHS = (0, 5, 14, 20, 29)


def bayes_known_type(data: Collected, task) -> dict:
    """Normalised errors of the Gaussian posterior mean of (α, β) given the true demand type."""
    h, step = data.history, data.step
    d = task.dim
    x, a, o = (
        h.contexts[:, : step - 1].double(),
        h.actions[:, : step - 1, 0].double(),
        h.observations[:, : step - 1, 0].double(),
    )
    square = data.labels["square"].bool()
    g = torch.where(square[:, None], a**2, a)
    z = torch.cat([x, -x * g[..., None]], dim=-1)  # (N, s, 2d)
    (a_lo, a_hi), (b_lo, b_hi) = task.alpha_range, task.beta_range
    m0 = torch.tensor([(a_lo + a_hi) / 2] * d + [(b_lo + b_hi) / 2] * d, dtype=torch.float64)
    v0 = torch.tensor([(a_hi - a_lo) ** 2 / 12] * d + [(b_hi - b_lo) ** 2 / 12] * d, dtype=torch.float64)
    var = task.noise_std**2
    prec = z.transpose(1, 2) @ z / var + torch.diag(1 / v0)
    rhs = (z.transpose(1, 2) @ o[..., None])[..., 0] / var + m0 / v0
    est = torch.linalg.solve(prec, rhs)  # (N, 2d)
    xt = h.contexts[:, step - 1].double()
    intercept, slope = (est[:, :d] * xt).sum(-1), (est[:, d:] * xt).sum(-1).clamp(min=1e-3)
    ratio = (intercept / slope).clamp(min=0)
    a_hat = torch.where(square, torch.sqrt(ratio / 3), ratio / 2).clamp(task.action_low, task.action_high)
    return {
        "params": normalised_mse(est.numpy(), data.params.double().numpy()),
        "demand_at_x": normalised_mse(torch.stack([intercept, slope], -1).numpy(), data.demand_at_x.double().numpy()),
        "action": normalised_mse(a_hat[:, None].numpy(), data.optimal_action.double().numpy()),
    }


def bayes_type(data: Collected, task) -> float:
    """Error of the Bayes classifier of the demand type (larger Gaussian marginal likelihood of the
    observed demands under the linear or the square model, equal prior odds), normalised as the probe's."""
    h, step = data.history, data.step
    d = task.dim
    x, a, o = (
        h.contexts[:, : step - 1].double(),
        h.actions[:, : step - 1, 0].double(),
        h.observations[:, : step - 1, 0].double(),
    )
    (a_lo, a_hi), (b_lo, b_hi) = task.alpha_range, task.beta_range
    m0 = torch.tensor([(a_lo + a_hi) / 2] * d + [(b_lo + b_hi) / 2] * d, dtype=torch.float64)
    v0 = torch.tensor([(a_hi - a_lo) ** 2 / 12] * d + [(b_hi - b_lo) ** 2 / 12] * d, dtype=torch.float64)
    evidence = []
    for g in (a, a**2):
        z = torch.cat([x, -x * g[..., None]], dim=-1)
        cov = task.noise_std**2 * torch.eye(z.shape[1], dtype=torch.float64) + z @ torch.diag(v0) @ z.transpose(1, 2)
        evidence.append(torch.distributions.MultivariateNormal(z @ m0, covariance_matrix=cov).log_prob(o))
    guess = evidence[1] > evidence[0]
    truth = data.labels["square"].bool()
    return float((guess != truth).double().mean() / 0.5)


def alg_star_action(data: Collected, task, seed: int) -> float:
    """Normalised error of Alg*'s decision at X_t given the same history (fed, not played)."""
    h, step = data.history, data.step
    policy = make_policy("alg-star", task)
    g = torch.Generator().manual_seed(stream_seed(Stream.ANALYSIS_POLICY, seed, AnalysisPart.REFERENCE, 0))
    policy.reset({k: v for k, v in h.envs.items()}, step, g)
    for t in range(step - 1):
        policy.act(t, h.contexts[:, t])
        policy.observe(t, h.actions[:, t], h.observations[:, t])
    decision = policy.act(step - 1, h.contexts[:, step - 1])
    return normalised_mse(decision.double().numpy(), data.optimal_action.double().numpy())


def evidence(run: Path, seed: int = EXPERIMENT_SEED) -> None:
    torch.set_num_threads(1)
    ckpts = run / "checkpoints"
    model, task, _ = load_model(ckpts / "last.ckpt")
    step = model.cfg.max_steps
    summary = {"run": str(run), "ckpt": str(ckpts / "last.ckpt"), "step": step, "seed": seed}
    pretraining = yaml.safe_load((run / "config.yaml").read_text())["data"]  # the run's own data policy
    for policy, options in {"omgpt": {}, pretraining["data_policy"]: pretraining["data_policy_options"] or {}}.items():
        out = HERE / policy
        common = dict(seed=seed, policy_options=options)
        train_set = collect(model, task, 1024, step, policy, part=AnalysisPart.PROBE_FIT, **common)
        test_set = collect(model, task, 256, step, policy, part=AnalysisPart.PROBE_TEST, keep_history=True, **common)
        probes = probe_collected(train_set, test_set)
        probes.update(
            task=task.name, task_options=task.options(), step=step, policy=policy, n_train=1024, n_test=256, seed=seed
        )
        probes["reference"] = {
            "bayes_known_type": bayes_known_type(test_set, task),
            "bayes_type": bayes_type(test_set, task),
            "alg_star_action": alg_star_action(test_set, task, seed),
        }
        ref = probes["reference"]
        probes["reference_errors"] = {
            "type": ref["bayes_type"],
            "params": ref["bayes_known_type"]["params"],
            "action": ref["alg_star_action"],
            "demand_at_x": ref["bayes_known_type"]["demand_at_x"],
        }
        plot_probes(
            probes,
            out / "probe.png",
            title=f"Linear probes at X_{step}, histories played by {policy} (1024 train / 256 test)",
        )
        write_json(probes, out / "probe.json")
        data = collect(model, task, 500, step, policy, part=AnalysisPart.TSNE, **common)
        ts = tsne_layers(data.hidden, data.labels["square"].long(), True, seed=seed)
        plot_tsne_layers(
            ts,
            out / "tsne.png",
            "demand type",
            {0: "linear", 1: "square"},
            title=f"t-SNE of X_{step} per layer, 500 histories played by {policy}",
        )
        write_json(
            {"layers": ts["layers"], "knn_accuracy": ts["knn"], "policy": policy, "step": step, "seed": seed},
            out / "tsne.json",
        )
        summary[policy] = {
            "probe_errors": probes["errors"],
            "model_error": probes["model_error"],
            "reference": probes["reference"],
            "tsne_knn_accuracy": ts["knn"],
        }
        print(policy, json.dumps(summary[policy]), flush=True)
    picks = [f"epoch{e:03d}.ckpt" for e in OOD_EPOCHS if (ckpts / f"epoch{e:03d}.ckpt").is_file()]
    models = [(p.removesuffix(".ckpt"), load_model(ckpts / p).model) for p in picks]
    ood = training_ood(models, task, n_seq=30, steps=20, seed=seed)
    plot_training_ood(
        ood, HERE / "training_ood.png", title="First 20 actions + observations of 30 sequences per checkpoint vs Alg*"
    )
    write_json({k: v for k, v in ood.items() if k not in ("points", "coords")}, HERE / "training_ood.json")
    summary["training_ood"] = {
        "distance_to_alg_star": ood["distance_to_alg_star"],
        "mean_suboptimality": ood["mean_suboptimality"],
    }
    print(json.dumps(summary["training_ood"]), flush=True)
    write_json(summary, HERE / "summary.json")


@entry_point
def main(argv: list[str] | None = None) -> None:
    p = script_parser(__file__, __doc__)
    p.add_argument(
        "run",
        nargs="?",
        type=InputFolder(),
        default="runs/interpretability/version_0",
        help="the pricing model's run folder (its checkpoints/ and config.yaml)",
    )
    p.add_argument("--seed", type=Seed("test"), default=EXPERIMENT_SEED, help="the test seed of every analysis")
    args = p.parse_args(argv)
    evidence(args.run, args.seed)


if __name__ == "__main__":
    sys.exit(main())
