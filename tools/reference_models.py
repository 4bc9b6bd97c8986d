"""Pre-trained reference models: train one with the CPU recipe, ship its weights and a card.

    python -m tools.reference_models train NAME [--minutes 90] [--runs-dir runs/pretrained]
    python -m tools.reference_models card NAME [--runs 1000] [--seed 2] [--runs-dir runs/pretrained]
    python -m tools.reference_models retest NAME [--runs 1000] [--seed 2] [--replication-seed 3]
    python -m tools.reference_models render NAME     # redraw a shipped card from its card.json
    python -m tools.reference_models adopt NAME KEY [--runs 1000] [--seed 2]   # ship results/models/KEY

A reference model is ``configs/pretrained/NAME.yaml`` (or, ``adopt``, a model an experiment trained into
the run store, as the fine-tuned ``*-rl`` models: its card records how): the task, its horizon, its length in epochs and
the CPU recipe written out in full (a shipped model's command must not drift with the scale configs'
defaults). ``train`` fits it with the run store (:mod:`omgpt.commands.store`: one CPU thread, resuming
from the run's ``last.ckpt`` when one exists, so a budget can be spent across sessions); the config's
``max_epochs`` sets its length (the cosine schedule is laid out over it) and ``--minutes`` of
wall-clock (Lightning's ``max_time``, counted across resumes) is only a safety cap. ``card`` takes the
checkpoint the run kept (the store's rule: lowest ``val/regret_ucb``), exports its weights -- and
hyper-parameters only, no optimizer state, so it stays small -- evaluates them on ``--runs`` fresh test environments against
``alg-star`` (where the task has a likelihood), every benchmark of the task and the oracle, and writes
``pretrained/NAME/card.md`` and ``card.json``: the command, steps, wall-clock, the validation curve,
the test table, the model's checksum, task and task options (the store reads a card only through
:func:`omgpt.commands.store.read_card`, which checks them), and a 10-run spot check that
``tests/test_pretrained.py`` reproduces; ``pretrained/NAME/model.ckpt`` is replaced only when the card
is complete. ``retest`` evaluates a shipped ``model.ckpt`` again (a new protocol, new benchmarks)
without its training run. Every argument is checked before anything is written: an error is one line,
``omgpt: error: ...``, exit code 2.

The test (docs/protocol.md) is on ``--runs`` (1,000) fresh environments of a test seed that chose nothing
(:data:`omgpt.seeding.CARD_SEED`; seed 1, the old cards', is where the pricing model's depth and length
were chosen), against every benchmark in its paper and tuned variants. ``card.json``'s top-level
``ratio_to_alg_star`` is OMGPT's mean final regret over ``alg-star``'s on the same environments with a
paired bootstrap 90% interval; ``replication`` repeats it on another test seed, and the two intervals
must overlap (``tests/test_pretrained.py``).
"""

from __future__ import annotations

import sys
import re
import tempfile
from pathlib import Path

from omgpt.analysis.report import interval
from omgpt.commands.store import clocks, fit, keep, kept_checkpoint, metric_rows, read_card, stamp, validation_points
from omgpt.errors import OMGPTError
from omgpt.files import atomic_write, save_figure, writable_file, write_json, write_text
from omgpt.seeding import CARD_SEED
from omgpt.entry import (
    InputFolder,
    Integer,
    Name,
    OutputFolder,
    Real,
    Seed,
    Text,
    entry_point,
    script_parser,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "pretrained"
STORE = ROOT / "results" / "models"  # the run store of the experiments (omgpt.commands.store)
PRETRAINED = ROOT / "pretrained"  # the shipped models: pretrained/NAME/{model.ckpt, card.json, card.md, ...}
SPOT_RUNS, SPOT_SEED = 10, 7  # the card's reproducible spot check


def fit_args(name: str, runs_dir: Path) -> list[str]:
    return [
        "fit",
        "--config",
        f"configs/pretrained/{name}.yaml",
        "--trainer.logger.init_args.save_dir",
        str(runs_dir),
        "--trainer.logger.init_args.name",
        name,
        "--trainer.logger.init_args.version",
        "0",
        "--trainer.enable_progress_bar",
        "false",
    ]


def run_dir(name: str, runs_dir: Path) -> Path:
    return runs_dir / name / "version_0"


def check_name(name: str) -> None:
    if name not in available():
        raise OMGPTError(f"no reference model {name!r}; available: {', '.join(available())}")


def train(name: str, runs_dir: Path, minutes: float) -> int:
    check_name(name)
    if name not in configured():
        raise OMGPTError(
            f"{name!r} was adopted from the run store, not trained from a config: its card says how it was made"
        )
    if not minutes >= 1:
        raise OMGPTError(f"--minutes must be at least 1 (the fit's wall-clock cap), got {minutes}")
    writable_file(runs_dir / f"{name}.log", "--runs-dir")  # an unwritable --runs-dir fails here, not in the fit
    hours, mins = divmod(int(minutes), 60)
    args = fit_args(name, runs_dir)[1:] + ["--trainer.max_time", f"00:{hours:02d}:{mins:02d}:00"]
    fit(args, run_dir(name, runs_dir), runs_dir / f"{name}.log", f"reference model {name!r}")
    return 0


def configured() -> list[str]:
    """The reference models trained by ``train`` from ``configs/pretrained/NAME.yaml``."""
    return sorted(p.stem for p in CONFIGS.glob("*.yaml"))


def available() -> list[str]:
    """Every reference model: the configured ones and those adopted from the run store (``adopt``)."""
    return sorted({*configured(), *(p.parent.name for p in PRETRAINED.glob("*/card.json"))})


def check_test_arguments(runs: int, seed: int, replication_seed: int | None = None) -> None:
    """Every argument checked before anything is written (a bad one must not touch a shipped model)."""
    from omgpt import seeding

    if runs < 2:
        raise OMGPTError(f"--runs must be at least 2 (a paired interval needs two environments), got {runs}")
    seeding.check_test_seed(seed, "--seed")
    if replication_seed is not None:
        seeding.check_test_seed(replication_seed, "--replication-seed")
        if replication_seed == seed:
            raise OMGPTError("--replication-seed must differ from --seed")


def card_policies(task) -> list[str]:
    """OMGPT, ``alg-star`` (where the task has a likelihood), every benchmark of the task with its tuned
    variant, and the oracle."""
    from omgpt.policies import policies_for
    from omgpt.policies.tuned import with_tuned_variants

    return [
        "omgpt",
        *(["alg-star"] if "alg-star" in policies_for(task) else []),
        *with_tuned_variants(list(task.benchmarks)),
        "oracle",
    ]


def test_model(
    name: str, model_ckpt: Path, horizon: int, runs: int, seed: int, replication_seed: int | None
) -> tuple[dict, dict, dict | None]:
    """The card's test, spot check and replication of the model at ``model_ckpt``."""
    from omgpt.commands.evaluate import run_evaluation
    from omgpt.model import load_model
    from omgpt.commands.tune import ensure_tuned

    from omgpt.tasks import make_episode_task

    trained = load_model(model_ckpt).task
    options = trained.test_options()  # a data task's test windows; a prior's test seeds need none
    task = make_episode_task(trained.name, {**trained.options(), **options}, horizon)
    runs = min(runs, getattr(task, "windows", runs))  # a data set's test windows, each played once
    policies = card_policies(task)
    ensure_tuned(task.name, task.options(), horizon, policies)
    out = PRETRAINED / name
    summary = run_evaluation(
        task.name, options, policies, str(model_ckpt), runs, None, None, seed, str(out / "test"), progress=False
    )
    spot = run_evaluation(
        task.name,
        options,
        ["omgpt"],
        str(model_ckpt),
        SPOT_RUNS,
        None,
        None,
        SPOT_SEED,
        str(out / "spot"),
        progress=False,
    )
    spot = {
        "runs": SPOT_RUNS,
        "seed": SPOT_SEED,
        "final_regret_mean": spot["policies"]["omgpt"]["final_regret"]["mean"],
        **({"task_options": options} if options else {}),
    }
    replication = None
    if replication_seed is not None and "alg-star" in policies:
        again = run_evaluation(
            task.name,
            {},
            ["omgpt", "alg-star"],
            str(model_ckpt),
            runs,
            None,
            None,
            replication_seed,
            str(out / "replication"),
            progress=False,
        )
        replication = {**again["policies"]["omgpt"]["ratio_to_alg_star"], "seed": replication_seed}
    return summary, spot, replication


def with_test(info: dict, summary: dict, spot: dict, replication: dict | None) -> dict:
    """The card's record with a new test: the summary, the spot check, and the top-level paired ratio."""
    info = {**info, "test": summary, "spot_check": spot}
    ratio = summary["policies"]["omgpt"].get("ratio_to_alg_star")
    info["ratio_to_alg_star"] = None if ratio is None else {**ratio, "seed": summary["seed"]}
    info["replication"] = replication
    return info


def card(name: str, runs_dir: Path, runs: int, seed: int, replication_seed: int | None = None) -> None:
    """Card the model the run ``runs_dir/NAME`` kept. The shipped ``model.ckpt`` is replaced only once
    the card's test is done (the test runs on a copy), just before its card: a failed or stopped
    ``card`` leaves the shipped model and card as they were."""
    from omgpt.model import load_model

    check_name(name)
    check_test_arguments(runs, seed, replication_seed)
    folder, out = run_dir(name, runs_dir), PRETRAINED / name
    kept_checkpoint(folder)  # the run has kept a model
    rows = metric_rows(folder)
    curve = validation_points(rows)
    if not curve:
        raise OMGPTError(f"{folder}: no validation logged (metrics*.csv); train {name} first")
    writable_file(out / "card.json", f"pretrained/{name}")
    with tempfile.TemporaryDirectory() as tmp:
        model_ckpt = Path(tmp) / "model.ckpt"
        kept, steps = keep(folder, model_ckpt)
        if steps not in [p["step"] for p in curve]:
            raise OMGPTError(
                f"{folder}: the kept checkpoint {kept.name} (step {steps}) has no validation in the run's metrics"
            )
        _, task, hparams = load_model(model_ckpt)
        horizon, wall = hparams["horizon"], clocks(rows).get("wall")
        info = {
            "name": name,
            "task": task.name,
            "horizon": horizon,
            "command": "omgpt " + " ".join(fit_args(name, Path("runs/pretrained"))),
            "kept_checkpoint": kept.name,
            "steps": steps,
            "cpu_minutes": curve[-1]["minutes"],
            "wall_minutes": None if wall is None else round(wall, 1),
            "validation": curve,
        }
        ship(name, info, model_ckpt, runs, seed, replication_seed)


def ship(name: str, info: dict, model_ckpt: Path, runs: int, seed: int, replication_seed: int | None) -> None:
    """Test the model at ``model_ckpt`` (a copy outside ``pretrained/``) for its card, then replace the
    shipped ``model.ckpt`` and write the card: a failed or stopped test leaves the shipped model and card
    as they were."""
    out = PRETRAINED / name
    info = stamp(info, model_ckpt)
    if (out / "card.json").is_file():  # replacing a model keeps its card's headline; re-carding one keeps its record
        shipped = read_card(out)
        previous = previous_recipe(shipped) if shipped["checksum"] != info["checksum"] else shipped.get("previous")
        info = {**info, **({"previous": previous} if previous else {})}
    info = with_test(info, *test_model(name, model_ckpt, info["horizon"], runs, seed, replication_seed))
    config = resolved_config(info["command"])  # before anything is replaced: a failure leaves the shipped model
    atomic_write(out / "model.ckpt", lambda f: f.write(model_ckpt.read_bytes()))
    write_card(info, out)
    write_text(out / "config.yaml", config)
    print(f"wrote {out / 'model.ckpt'} ({(out / 'model.ckpt').stat().st_size / 1e6:.1f} MB), {out / 'card.md'}")


def previous_recipe(card: dict) -> dict:
    """What a retrained reference model keeps of the card it replaces, so that its card shows the old
    recipe's number beside the new one: the trained steps, their CPU-minutes, and the test's headline
    (the paired ratio to ``alg-star`` where the task has one, else OMGPT's final regret)."""
    return {
        "steps": card["validation"][-1]["step"],
        "cpu_minutes": card["cpu_minutes"],
        "runs": card["test"]["runs"],
        "seed": card["test"]["seed"],
        "final_regret": card["test"]["policies"]["omgpt"]["final_regret"]["mean"],
        "ratio_to_alg_star": card.get("ratio_to_alg_star"),
    }


def adopt(
    name: str, key: str, runs: int, seed: int, replication_seed: int | None = None, replace: bool = False
) -> None:
    """Ship a model that an experiment trained into the run store, ``results/models/KEY`` (the
    fine-tuned models of ``omgpt experiment beyond-alg-star``), as ``pretrained/NAME``, carded like a
    trained one. Its training record is the store's: the fit's command and kept checkpoint
    (``done.json``), its validation curve (``run/metrics.csv``, which the store keeps beside its model
    until then) and the supervised model it was fine-tuned from, with that model's own cost.

    A shipped ``pretrained/NAME`` is never replaced by accident: its name is refused unless ``replace``,
    and even then only a model of the shipped one's task, task options and horizon replaces it."""
    from omgpt.checkpoints import read_checkpoint
    from omgpt.commands.store import read_record
    from omgpt.model import checkpoint_hparams

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or name in configured():
        raise OMGPTError(
            f"cannot adopt as {name!r}: "
            + (
                "a configured reference model has that name (train and card it)"
                if name in configured()
                else "a name is letters, digits, '.', '_' and '-', not starting with a dot"
            )
        )
    check_test_arguments(runs, seed, replication_seed)
    if (PRETRAINED / name).exists() and not replace:  # before anything about the store's model
        check_replaceable(name, {}, key, replace)
    folder, out = STORE / key, PRETRAINED / name
    record = read_record(folder)  # checked: schema and the model's checksum
    curve = validation_points(metric_rows(folder / "run"))
    if not curve:
        raise OMGPTError(
            f"{folder / 'run'}: no validation logged (metrics*.csv); the fit's run folder is needed to card its model"
        )
    checkpoint = read_checkpoint(folder / record["ckpt"])
    check_replaceable(name, checkpoint_hparams(checkpoint, folder / record["ckpt"]), key, replace)
    kept_step = checkpoint["global_step"]  # (the record's "steps" are those trained)
    if kept_step not in [p["step"] for p in curve]:
        raise OMGPTError(f"{folder}: the kept checkpoint's step {kept_step} has no validation in the run's metrics")
    parent = record.get("init_from")
    if parent:  # a model of the store, or a shipped reference model (pretrained/NAME: its card)
        parent = read_card(ROOT / parent) if parent.startswith("pretrained/") else read_record(STORE / parent)
        parent = {
            "steps": parent["steps"],
            "cpu_minutes": parent["cpu_minutes"]
            if "cpu_minutes" in parent
            else round((parent.get("cpu_seconds") or parent["train_seconds"]) / 60, 1),
        }
    writable_file(out / "card.json", f"pretrained/{name}")
    with tempfile.TemporaryDirectory() as tmp:
        model_ckpt = Path(tmp) / "model.ckpt"
        model_ckpt.write_bytes((folder / record["ckpt"]).read_bytes())
        info = {
            "name": name,
            "task": record["task"],
            "horizon": checkpoint["hyper_parameters"]["horizon"],
            "command": record["command"],
            "kept_checkpoint": record["kept_checkpoint"],
            "steps": kept_step,
            "cpu_minutes": curve[-1]["minutes"],
            "wall_minutes": round(record["train_seconds"] / 60, 1),
            "validation": curve,
            "adopted_from": {
                "store_key": key,
                "model": record["model"],
                "init_from": record.get("init_from"),
                **({"parent_steps": parent["steps"], "parent_cpu_minutes": parent["cpu_minutes"]} if parent else {}),
            },
        }
        ship(name, info, model_ckpt, runs, seed, replication_seed)


def check_replaceable(name: str, hparams: dict, key: str, replace: bool) -> None:
    """``adopt``'s rule for an existing ``pretrained/NAME``: refused without ``--replace``, and refused
    with it when the store's model plays another setting (task, task options, horizon) than the shipped one."""
    from omgpt.checkpoints import read_checkpoint
    from omgpt.model import checkpoint_hparams

    out = PRETRAINED / name
    if not out.exists():
        return
    if not replace:
        raise OMGPTError(
            f"pretrained/{name} is a shipped model: adopting results/models/{key} as {name!r} would replace its model "
            f"and card; choose a new name, or give --replace"
        )
    shipped = out / "model.ckpt"
    if not shipped.is_file():
        raise OMGPTError(f"pretrained/{name} holds no model.ckpt: remove the folder by hand, or choose a new name")
    setting = lambda hp: (hp["task"], hp.get("task_options") or {}, hp["horizon"])  # noqa: E731
    old, new = setting(checkpoint_hparams(read_checkpoint(shipped), shipped)), setting(hparams)
    if old != new:
        raise OMGPTError(
            f"--replace: pretrained/{name} plays {old[0]} {old[1] or ''} at horizon {old[2]}, results/models/{key} "
            f"{new[0]} {new[1] or ''} at horizon {new[2]}; a shipped model is replaced only by one of its own task"
        )


def shipped_card(name: str) -> dict:
    """The card of the shipped model ``pretrained/NAME``, read and checked by the run store."""
    check_name(name)
    if not (PRETRAINED / name / "card.json").exists():
        raise OMGPTError(f"no shipped model pretrained/{name} (train it, then card it)")
    return read_card(PRETRAINED / name)


def retest(name: str, runs: int, seed: int, replication_seed: int | None) -> None:
    """Test a shipped model again (its training run need not be here): card.json keeps its training
    record and gets the new test."""
    check_test_arguments(runs, seed, replication_seed)
    info, out = shipped_card(name), PRETRAINED / name
    write_card(
        with_test(info, *test_model(name, out / "model.ckpt", info["horizon"], runs, seed, replication_seed)), out
    )
    print(f"wrote {out / 'card.md'}")


def resolved_config(command: str) -> str:
    """The whole resolved config of a training ``command`` (``omgpt fit ...``): what ``--print_config``
    prints, every default filled in, so one file reads as the whole run."""
    import shlex
    import subprocess

    args = shlex.split(command)
    if args[:2] != ["omgpt", "fit"]:
        raise OMGPTError(f"{command!r} is not an omgpt fit command")
    done = subprocess.run(
        [sys.executable, "-m", "omgpt", *args[1:], "--print_config"], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise OMGPTError(f"{command}: --print_config failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done.stdout


def write_config(name: str) -> Path:
    """``pretrained/NAME/config.yaml``: the shipped model's resolved training config, beside its card."""
    path = PRETRAINED / name / "config.yaml"
    write_text(path, resolved_config(shipped_card(name)["command"]))
    return path


def write_card(info: dict, out: Path) -> None:
    """``card.json``, ``card.md`` and ``validation.png`` from the card's record alone (``render`` redraws
    a shipped card after a format change without evaluating again). The page is composed before any
    file is written: a card it cannot be drawn from leaves the shipped files as they were."""
    name, summary, curve = info["name"], info["test"], info["validation"]
    rows = sorted(summary["policies"].items(), key=lambda kv: kv[1]["final_regret"]["mean"])
    star = summary["policies"].get("alg-star", {}).get("final_regret", {}).get("mean")
    trained = curve[-1]["step"]
    lines = [
        f"# Reference model `{name}`",
        "",
        f"Task `{info['task']}`, horizon {info['horizon']}; trained with",
        "",
        f"    {info['command']}",
        "",
    ]
    source = info.get("adopted_from")
    if source:
        lines += [
            f"by `omgpt experiment` as its model `{source['model']}` (run store key `{source['store_key']}`): "
            + (
                f"fine-tuned from the supervised model `{_model_path(source['init_from'])}` ({source['parent_steps']:,} steps, "
                f"{source['parent_cpu_minutes']} CPU-minutes of pre-training; docs/finetune.md). "
                if source.get("init_from")
                else ""
            )
            + "The steps and CPU-minutes below are the fine-tuning's.",
            "",
        ]
    lines += [
        f"{trained} steps trained in {info['cpu_minutes']} CPU-minutes of one thread (the wall-clock on an idle core of the "
        f"2-core CPU machine; {info['wall_minutes']} minutes of wall-clock as it ran, sharing the machine); "
        f"the model is the checkpoint the run kept, `{info['kept_checkpoint']}` at step {info['steps']} "
        + (
            "(lowest validation cost per unit demanded)."
            if "-spl" in info["kept_checkpoint"]
            else "(lowest validation mean + one sd of regret)."
        ),
        "",
        f"## Test: {summary['runs']} fresh environments (test seed {summary['seed']})",
        "",
        "| policy | final regret | 90% CI | × alg-star [paired 90% CI] | \\|a − a*\\| at T |",
        "|---|---|---|---|---|",
    ]
    for pol, s in rows:
        q = s.get("ratio_to_alg_star")
        if q:
            ratio = ratio_text(q)
        else:  # a card written before the paired ratio
            ratio = f"{s['final_regret']['mean'] / star:.2f}" if star and pol != "alg-star" else "—"
        lines.append(
            f"| {pol} | {s['final_regret']['mean']:.2f} | {interval(s['final_regret']['ci90'])} | {ratio} | {s['final_suboptimality']['mean']:.3f} |"
        )
    real = summary.get("real_demand")
    if real:  # a data task: its headline metric, as the real-demand experiment reports it
        ref = real["reference"]
        lines += [
            "",
            f"Cost per unit demanded (total cost over total demand) [90% cluster-bootstrap interval over the "
            f"{real['groups']} held-out {real['clusters']}], and its paired ratio to `{ref}`:",
            "",
            f"| policy | cost per unit demanded | × {ref} [paired 90% CI] |",
            "|---|---|---|",
        ]
        for pol, c in sorted(real["costs"].items(), key=lambda kv: kv[1]["scaled_cost"]["mean"]):
            r = c["ratio_to_" + ref]
            ratio = "1" if r is None else f"{r['mean']:.2f} {interval(r['ci90'])}"
            lo, hi = c["scaled_cost"]["ci90"]
            lines.append(f"| {pol} | {c['scaled_cost']['mean']:.4f} [{lo:.4f}, {hi:.4f}] | {ratio} |")
    if info.get("provenance"):  # what chose this model beyond its config (a card's own record, so render keeps it)
        lines += ["", info["provenance"]]
    rep = info.get("replication")
    if rep and info.get("ratio_to_alg_star"):
        lines += [
            "",
            f"Replication on {rep['runs']} other fresh environments (test seed {rep['seed']}): OMGPT / alg-star "
            f"{ratio_text(rep)}, against {ratio_text(info['ratio_to_alg_star'])} above.",
        ]
    if info.get("previous"):
        lines += ["", f"The model this one replaced: {previous_headline(info['previous'])}."]
    lines += [
        "",
        "## Validation curve (the run's fixed validation environments, never the test ones)",
        "",
        "![validation](validation.png)",
        "",
        "| step | CPU-minutes | regret | \\|a − a*\\| at T |",
        "|---|---|---|---|",
    ]
    lines += [f"| {p['step']} | {p['minutes']} | {p['regret']:.2f} | {p['subopt']:.3f} |" for p in curve]
    policies = ",".join(summary["policies"])
    options = "".join(f" --option {k}={v}" for k, v in info["spot_check"].get("task_options", {}).items())
    lines += [
        "",
        f"Reproduce the test: `omgpt evaluate --ckpt pretrained/{name}{options} --policies {policies} --runs {summary['runs']} --seed {summary['seed']}`",
    ]
    write_json(info, out / "card.json", indent=1)
    plot_validation(curve, name, out / "validation.png")
    write_text(out / "card.md", "\n".join(lines) + "\n")


def ratio_text(q: dict) -> str:
    """A paired ratio and its interval, as a card shows it (``undefined`` where the mean is)."""
    return "undefined" if q["mean"] is None else f"{q['mean']:.2f} {interval(q['ci90'])}"


def previous_headline(previous: dict) -> str:
    """A replaced model's number, as its card shows it."""
    q = previous["ratio_to_alg_star"]
    number = (
        f"OMGPT / alg-star {q['mean']:.2f} {interval(q['ci90'])}"
        if q and q["mean"] is not None
        else f"final regret {previous['final_regret']:.2f}"
    )
    return (
        f"{number} on {previous['runs']:,} test environments (seed {previous['seed']}), "
        f"{previous['steps']:,} steps in {previous['cpu_minutes']:.0f} CPU-minutes"
    )


def _model_path(init_from: str) -> str:
    """Where a fine-tuned model's parent lives: a shipped reference model, or a model of the run store."""
    return init_from if init_from.startswith("pretrained/") else f"results/models/{init_from}"


def plot_validation(curve: list[dict], name: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    minutes = [p["minutes"] for p in curve]
    left.plot(minutes, [p["regret"] for p in curve], marker=".")
    right.plot(minutes, [p["subopt"] for p in curve], marker=".")
    left.set(xlabel="training time (CPU-minutes, one core)", ylabel="validation regret at T", yscale="log", title=name)
    right.set(xlabel="training time (CPU-minutes, one core)", ylabel="validation |a - a*| at t = T", yscale="log")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("name", type=Name(configured))
    t.add_argument("--minutes", type=Real(1, 100_000), default=90)
    t.add_argument("--runs-dir", type=OutputFolder(under=ROOT), default="runs/pretrained")
    c = sub.add_parser("card")
    c.add_argument("name", type=Name(configured))
    c.add_argument("--runs", type=Integer(2, 1_000_000), default=1000)
    c.add_argument("--seed", type=Seed("test"), default=CARD_SEED)
    c.add_argument("--replication-seed", type=Seed("test"), default=CARD_SEED + 1)
    c.add_argument("--runs-dir", type=InputFolder(under=ROOT), default="runs/pretrained")
    e = sub.add_parser(
        "retest", help="test a shipped model again (new protocol or benchmarks), keeping its training record"
    )
    e.add_argument("name", type=Name(available))
    e.add_argument("--runs", type=Integer(2, 1_000_000), default=1000)
    e.add_argument("--seed", type=Seed("test"), default=CARD_SEED)
    e.add_argument("--replication-seed", type=Seed("test"), default=CARD_SEED + 1)
    a = sub.add_parser(
        "adopt", help="ship a model of the run store (results/models/KEY) as pretrained/NAME, with its card"
    )
    a.add_argument("name", type=Text(), help="the shipped model's name, pretrained/NAME")
    a.add_argument("key", type=Text(), help="the run store's key of the model, results/models/KEY")
    a.add_argument("--runs", type=Integer(2, 1_000_000), default=1000)
    a.add_argument("--seed", type=Seed("test"), default=CARD_SEED)
    a.add_argument("--replication-seed", type=Seed("test"), default=CARD_SEED + 1)
    a.add_argument(
        "--replace",
        action="store_true",
        help="replace the shipped pretrained/NAME (by a model of its own task, options and horizon only)",
    )
    r = sub.add_parser("render", help="rewrite a shipped card's card.md and figure from its card.json")
    r.add_argument("name", type=Name(available))
    g = sub.add_parser("config", help="write pretrained/NAME/config.yaml: the model's resolved training config")
    g.add_argument("name", type=Name(available))
    args = p.parse_args(argv)
    if args.cmd == "config":
        print(f"wrote {write_config(args.name).relative_to(ROOT)}")
        return 0
    if args.cmd == "train":
        return train(args.name, args.runs_dir, args.minutes)
    if args.cmd == "render":
        write_card(shipped_card(args.name), PRETRAINED / args.name)
    elif args.cmd == "adopt":
        adopt(args.name, args.key, args.runs, args.seed, args.replication_seed, replace=args.replace)
    elif args.cmd == "retest":
        retest(args.name, args.runs, args.seed, args.replication_seed)
    else:
        card(args.name, args.runs_dir, args.runs, args.seed, args.replication_seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
