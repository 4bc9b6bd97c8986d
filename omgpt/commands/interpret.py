"""``omgpt probe | tsne | tsne-training | manipulate``: the interpretability experiments of paper §5.3 (and
appendix B) on checkpoints.

Each command writes a PNG and a JSON into ``--out`` and prints where; bad input (missing or foreign
checkpoint, a step beyond the model's horizon, a label the task does not have, ...) ends with one line
``omgpt: error: …`` and exit code 2 (:class:`~omgpt.errors.OMGPTError`, turned into that by ``cli_main``).

* ``omgpt probe --ckpt C [--n-train 1024 --n-test 256 --step T --policy omgpt --seed 7 --out DIR]``
  -> ``probe.png``, ``probe.json`` (per-layer normalised held-out errors; ``analysis.probing``).
* ``omgpt tsne --ckpt C [--samples 500 --step T --label type|action|model --layers 0,1,4 --out DIR]``
  -> ``tsne.png``, ``tsne.json`` (t-SNE of every layer; ``analysis.tsne``).
* ``omgpt tsne-training --ckpt C1 --ckpt C2 … [--sequences 30 --steps 20 --no-alg-star --out DIR]``
  -> ``training_ood.png``, ``training_ood.json`` (histories of each checkpoint vs Alg*, appendix B).
* ``omgpt manipulate --ckpt C [--n 1000 --step 50 --low 0 --high 10 --columns state|all|0,2 --out DIR]``
  -> ``manipulation.png``, ``manipulation.json`` (``analysis.manipulation``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from omgpt.commands.args import (
    CheckpointPath,
    Device,
    Number,
    OutputDir,
    PositiveFloat,
    PositiveInt,
    Seed,
    task_options,
)
from omgpt.errors import OMGPTError
from omgpt.files import output_folder, write_json
from omgpt.seeding import EXPERIMENT_SEED, check_test_seed

if TYPE_CHECKING:
    from omgpt.model import TrainedModel


def _trained_model(path: str, device: str = "cpu") -> TrainedModel:
    """``(model, task, hparams)`` of a checkpoint (:func:`omgpt.model.load_model`: no Lightning)."""
    from omgpt.model import load_model

    return load_model(path, map_location=device)


def _task(trained: TrainedModel, options: list[str]):
    """The checkpoint's task, with test-time ``--option key=value`` overrides (e.g. a noise level)
    that keep the token sizes the model reads and writes."""
    if not options:
        return trained.task
    from omgpt.commands.evaluate import check_token_sizes
    from omgpt.tasks import make_episode_task

    overrides = task_options(options)
    task = make_episode_task(
        trained.hparams["task"],
        {**(trained.hparams.get("task_options") or {}), **overrides},
        trained.hparams["horizon"],
    )
    check_token_sizes(task, overrides, trained.model)
    return task


def _step(trained: TrainedModel, step: int | None) -> int:
    horizon = trained.model.cfg.max_steps
    step = horizon if step is None else step
    if not 1 <= step <= horizon:
        raise OMGPTError(f"--step must be in 1..{horizon} (the checkpoint's horizon), got {step}")
    return step


TSNE_FILES = ("tsne.png", "tsne.json")  # what `omgpt tsne` writes into --out
TSNE_TRAINING_FILES = ("training_ood.png", "training_ood.json")  # what `omgpt tsne-training` writes


# --------------------------------------------------------------------------------------------------
def probe_command(
    ckpt: CheckpointPath,
    n_train: PositiveInt = 1024,
    n_test: PositiveInt = 256,
    step: Optional[int] = None,
    policy: str = "omgpt",
    option: Optional[list[str]] = None,
    seed: Seed = EXPERIMENT_SEED,
    device: Device = "cpu",
    out: OutputDir = "runs/probe",
) -> int:
    """Linear probes of every layer's embedding (paper §5.3).

    Args:
        ckpt: checkpoint of a trained OMGPT
        n_train: histories to fit the probes (paper: 1024)
        n_test: held-out histories (paper: 256)
        step: probe the feature token of X_step, 1-based (default: the horizon; paper: 100)
        policy: who plays the histories (default: the model itself)
        option: task option override KEY=VALUE, repeatable
        seed: test seed of the environments and their noise (a burned one is refused)
        device: torch device, e.g. cuda
        out: output folder, written as a whole
    """
    from omgpt.analysis.probing import plot_probes, run_probes

    check_test_seed(seed, "--seed")
    trained = _trained_model(ckpt, device)
    task, step = _task(trained, option), _step(trained, step)
    with output_folder(out, ("probe.png", "probe.json"), "omgpt probe") as folder:
        result = run_probes(trained.model, task, n_train, n_test, step, policy, seed)
        result["ckpt"] = str(ckpt)
        plot_probes(result, folder / "probe.png")
        write_json(result, folder / "probe.json")
    out = Path(out)
    width = max(len(k) for k in result["errors"])
    print(f"normalised held-out error per layer at X_{step} (1 = chance / the mean):")
    for name, curve in result["errors"].items():
        print(f"  {name:<{width}}  " + "  ".join(f"{v:.3f}" for v in curve))
    print(f"  model read-out of a*: {result['model_error']:.3f}")
    print(f"wrote {out / 'probe.png'} and {out / 'probe.json'}")
    return 0


def _parse_layers(text: str | None, n: int) -> list[int] | None:
    if text is None:
        return None
    try:
        layers = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise OMGPTError(f"--layers expects comma-separated integers, got {text!r}") from None
    bad = [k for k in layers if not 0 <= k <= n]
    if bad or not layers:
        raise OMGPTError(f"--layers must lie in 0..{n} (0 = input embedding), got {text!r}")
    return layers


def tsne_command(
    ckpt: list[CheckpointPath],
    samples: PositiveInt = 500,
    step: Optional[int] = None,
    label: Optional[str] = None,
    layers: Optional[str] = None,
    policy: str = "omgpt",
    perplexity: PositiveFloat = 30.0,
    option: Optional[list[str]] = None,
    seed: Seed = EXPERIMENT_SEED,
    device: Device = "cpu",
    out: OutputDir = "runs/tsne",
) -> int:
    """t-SNE of every layer's embedding (paper §5.3); across checkpoints: omgpt tsne-training.

    Args:
        ckpt: checkpoint of a trained OMGPT (one; omgpt tsne-training compares several)
        samples: histories (paper: 500, half of each demand type)
        step: the feature token of X_step, 1-based (default: the horizon)
        label: colour by 'type' (mixed demand types; default there), 'action' (a*_t, default otherwise) or 'model' (the model's read-out)
        layers: which layers, e.g. 0,1,2,10,11,12 (default: all)
        policy: who plays the histories (default: the model itself)
        perplexity: t-SNE perplexity (capped below a third of the points)
        option: task option override KEY=VALUE, repeatable
        seed: test seed of the environments and their noise (a burned one is refused)
        device: torch device, e.g. cuda
        out: output folder, written as a whole
    """
    if len(ckpt) != 1:
        raise OMGPTError("omgpt tsne takes exactly one --ckpt (omgpt tsne-training compares several)")
    from omgpt.analysis.capture import collect
    from omgpt.analysis.tsne import plot_tsne_layers, tsne_layers

    check_test_seed(seed, "--seed")
    trained = _trained_model(ckpt[0], device)
    task, step = _task(trained, option), _step(trained, step)
    layer_list = _parse_layers(layers, trained.model.cfg.n_layer)
    if label not in (None, "type", "action", "model"):
        raise OMGPTError(f"--label must be 'type', 'action' or 'model', got {label!r}")
    with output_folder(out, TSNE_FILES, "omgpt tsne") as folder:
        data = collect(trained.model, task, samples, step, policy, seed=seed)
        label = label or ("type" if data.hidden_type is not None else "action")
        if label == "type":
            if data.hidden_type is None:
                raise OMGPTError(
                    f"--label type needs a task with a hidden type, e.g. mixed demand types (task {task.name!r} has one type); use --label action"
                )
            values, categorical, name, classes = (
                data.types(),
                True,
                data.hidden_type.name,
                dict(enumerate(data.hidden_type.classes)),
            )
        elif label == "action":
            values, categorical, name, classes = data.optimal_action, False, f"a*_{step}", None
        else:
            values, categorical, name, classes = data.prediction, False, f"model's a_{step}", None
        result = tsne_layers(data.hidden, values, categorical, layer_list, perplexity, seed)
        plot_tsne_layers(
            result,
            folder / "tsne.png",
            name,
            classes,
            title=f"t-SNE of the embedding of X_{step} per layer ({task.name}, {samples} histories)",
        )
        write_json(
            {
                "ckpt": ckpt[0],
                "task": task.name,
                "task_options": task.options(),
                "step": step,
                "samples": samples,
                "label": label,
                "policy": policy,
                "seed": seed,
                "layers": result["layers"],
                "knn_score": result["knn"],
                "knn_score_meaning": "leave-one-out 10-NN accuracy of the label in the 2-D map"
                if categorical
                else "leave-one-out 10-NN R^2 of the label in the 2-D map",
                "coords": {str(k): c for k, c in zip(result["layers"], result["coords"])},
                "labels": result["labels"],
            },
            folder / "tsne.json",
        )
    out = Path(out)
    print("layer  " + "  ".join(f"{k:>5}" for k in result["layers"]))
    print("10-NN  " + "  ".join(f"{v:5.2f}" for v in result["knn"]))
    print(f"wrote {out / 'tsne.png'} and {out / 'tsne.json'}")
    return 0


def tsne_training_command(
    ckpt: list[CheckpointPath],
    sequences: PositiveInt = 30,
    steps: PositiveInt = 20,
    no_alg_star: bool = False,
    perplexity: PositiveFloat = 30.0,
    option: Optional[list[str]] = None,
    seed: Seed = EXPERIMENT_SEED,
    device: Device = "cpu",
    out: OutputDir = "runs/tsne-training",
) -> int:
    """t-SNE of the histories played by several checkpoints of one training, against Alg*'s (appendix B).

    Args:
        ckpt: checkpoint, repeated: one per stage of a training (oldest first), all of one task
        sequences: sequences per checkpoint (paper: 30)
        steps: steps stacked into a point (paper: 20)
        no_alg_star: leave Alg* out
        perplexity: t-SNE perplexity (capped below a third of the points)
        option: task option override KEY=VALUE, repeatable
        seed: test seed of the environments and their noise (a burned one is refused)
        device: torch device, e.g. cuda
        out: output folder, written as a whole
    """
    from omgpt.analysis.tsne import plot_training_ood, training_ood

    check_test_seed(seed, "--seed")
    trained = [(Path(c).stem, _trained_model(c, device)) for c in ckpt]
    names = [n for n, _ in trained]
    if len(set(names)) != len(names):  # e.g. last.ckpt of two runs: fall back to the full paths
        names = [str(c) for c in ckpt]
    tasks = {(m.hparams["task"], json.dumps(m.hparams.get("task_options") or {}, sort_keys=True)) for _, m in trained}
    if len(tasks) > 1:
        raise OMGPTError(f"the checkpoints were trained on different tasks: {sorted(tasks)}")
    task = _task(trained[0][1], option)
    models = [(n, m.model) for n, (_, m) in zip(names, trained)]
    with output_folder(out, TSNE_TRAINING_FILES, "omgpt tsne-training") as folder:
        result = training_ood(models, task, sequences, steps, seed, alg_star=not no_alg_star, perplexity=perplexity)
        plot_training_ood(result, folder / "training_ood.png")
        write_json(
            {k: v for k, v in result.items() if k != "points"} | {"ckpts": list(ckpt), "task": task.name},
            folder / "training_ood.json",
        )
    out = Path(out)
    for name in result["groups"]:
        d = result["distance_to_alg_star"].get(name)
        print(
            f"  {name:<24} mean |a - a*| {result['mean_suboptimality'][name]:.3f}"
            + (f"   distance to Alg* {d:.2f}" if d is not None else "")
        )
    for note in result["notes"]:
        print(f"  note: {note}")
    print(f"wrote {out / 'training_ood.png'} and {out / 'training_ood.json'}")
    return 0


def manipulate_command(
    ckpt: CheckpointPath,
    n: PositiveInt = 1000,
    step: int = 50,
    low: Number = 0.0,
    high: Number = 10.0,
    columns: Optional[str] = None,
    policy: str = "omgpt",
    option: Optional[list[str]] = None,
    seed: Seed = EXPERIMENT_SEED,
    device: Device = "cpu",
    out: OutputDir = "runs/manipulate",
) -> int:
    """Context manipulation: optimal decision inference (paper §5.3.2).

    Args:
        ckpt: checkpoint (paper: the non-perishable newsvendor)
        n: environments (paper: 1000)
        step: the manipulated step t, 1-based (paper: 50; capped at the horizon)
        low: manipulated context ~ U[low, high] (paper: [0, 10])
        high: the upper end of the manipulated context's range
        columns: context columns replaced: 'state' (the inventory; default when the task has one), 'all', or indices like 0,2
        policy: who plays the histories up to t (default: the model itself)
        option: task option override KEY=VALUE, repeatable
        seed: test seed of the environments and their noise (a burned one is refused)
        device: torch device, e.g. cuda
        out: output folder, written as a whole
    """
    from omgpt.analysis.manipulation import manipulate, plot_manipulation

    check_test_seed(seed, "--seed")
    trained = _trained_model(ckpt, device)
    task = _task(trained, option)
    step = _step(trained, min(step, trained.model.cfg.max_steps) if step >= 1 else step)
    with output_folder(out, ("manipulation.png", "manipulation.json"), "omgpt manipulate") as folder:
        result = manipulate(trained.model, task, n, step, low, high, columns, policy, seed)
        plot_manipulation(result, folder / "manipulation.png")
        summary = {k: v for k, v in result.items() if k != "arrays"} | {"ckpt": str(ckpt)}
        write_json(summary, folder / "manipulation.json")
    out = Path(out)
    b, af, ch = result["tf_minus_a_star_before"], result["tf_minus_a_star_after"], result["optimal_change"]
    print(
        f"a*(X') - a*(X): median {ch['median']:.2f}, |change| > 0.5 in {result['fraction_changed']:.0%} of environments"
    )
    if "optimal_quantity_change" in result:
        q = result["optimal_quantity_change"]
        print(
            f"  as order quantity (paper): median {q['median']:.2f}, |change| > 0.5 in {result['fraction_quantity_changed']:.0%}"
        )
    print(f"TF - a* before: median {b['median']:.2f}, IQR [{b['q1']:.2f}, {b['q3']:.2f}], mean |.| {b['mean_abs']:.2f}")
    print(
        f"TF - a* after:  median {af['median']:.2f}, IQR [{af['q1']:.2f}, {af['q3']:.2f}], mean |.| {af['mean_abs']:.2f}"
    )
    if result["changed_after"] is not None:
        cb, ca, ci = result["changed_before"], result["changed_after"], result["changed_if_ignored"]
        print(
            f"where a* moved: mean |TF - a*| before {cb['mean_abs']:.2f}, after {ca['mean_abs']:.2f} (ignoring the change: {ci['mean_abs']:.2f})"
        )
    print(f"wrote {out / 'manipulation.png'} and {out / 'manipulation.json'}")
    return 0
