"""``omgpt experiment beyond-alg-star`` (issue 33, docs/finetune.md): models that start from another
model's weights (``init_from``: trained after it, keyed by it), and the kind that reports the supervised
OMGPT against its regret-fine-tuned child, ``alg-star`` and the best benchmark -- numbers computed from
the same test environments' final regrets, the child started from its parent's weights."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from omgpt.commands.cli import cli_main
from omgpt.commands.experiment import Model, dependency_order, experiment_keys, load_experiment, model_key
from omgpt.commands.experiment.kinds.beyond_alg_star import below_best, finetuning_numbers, worse
from omgpt.errors import OMGPTError
from omgpt.records import RecordError
from omgpt.checkpoints import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "tests/configs/experiment_tiny.yaml")


def _parents(**parents) -> dict[str, Model]:
    """Models that start from one another: name -> the model it starts from (or None)."""
    return {name: Model(task="newsvendor", horizon=6, init_from=parent) for name, parent in parents.items()}


DECLARED = {"claims": {"alg_star_beaten": []}, "selection": {"runs": 10, "seed": 10_100}}


def _experiment(
    tmp_path, monkeypatch, models: dict, panels: list | None = None, name: str = "dep", settings: dict | None = None
) -> str:
    kind = "beyond-alg-star" if name == "beyond-alg-star" else "curves"  # the kind the config names
    """An experiment config of these models in a scratch config folder (the real ones untouched)."""
    from omgpt.commands.experiment import config

    folder = tmp_path / "experiments"
    folder.mkdir(exist_ok=True)
    panels = panels or [{"title": "p", "model": next(iter(models)), "policies": ["omgpt", "erm"]}]
    (folder / f"{name}.yaml").write_text(
        yaml.safe_dump(
            {"title": "t", "kind": kind, "horizon": 6, "models": models, "panels": panels, "settings": settings or {}}
        )
    )
    monkeypatch.setattr(config, "EXPERIMENTS", folder)
    return name


def test_models_are_ordered_parents_first_and_a_bad_init_from_is_one_line(tmp_path, monkeypatch, capsys):
    assert dependency_order(_parents(c="b", a=None, b="a", d=None)) == ["a", "b", "c", "d"]
    with pytest.raises(OMGPTError, match="model 'b' has init_from 'x', which names no model"):
        dependency_order(_parents(a="b", b="x"))
    with pytest.raises(OMGPTError, match=r"init_from makes a cycle \(a -> b -> a\)"):
        dependency_order(_parents(a="b", b="a"))
    with pytest.raises(OMGPTError, match=r"cycle \(a -> a\)"):
        dependency_order(_parents(a="a"))

    nv = {"task": "newsvendor"}
    bad = {
        "unknown": {"m": nv, "m-rl": {**nv, "init_from": "nope"}},
        "cyclic": {"m": {**nv, "init_from": "m-rl"}, "m-rl": {**nv, "init_from": "m"}},
        "other-task": {"m": nv, "m-rl": {"task": "newsvendor-censored", "init_from": "m"}},
    }
    for name, spec in bad.items():
        _experiment(tmp_path, monkeypatch, spec, name=name)
        assert cli_main(["experiment", name, "--train-only", "--models-dir", str(tmp_path / "models")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3, err  # one line each, nothing trained
    assert "init_from 'nope', which names no model" in err[0] and "init_from makes a cycle" in err[1]
    assert "model 'm-rl' starts from 'm', a model of another task, options or horizon" in err[2]
    assert not (tmp_path / "models").exists()


def test_a_childs_key_covers_its_parents_key_and_no_machine_path(tmp_path, monkeypatch):
    from omgpt.commands.experiment import models as store

    exp = load_experiment("beyond-alg-star", "cpu")
    keys = experiment_keys(exp, [])
    # the supervised models are ones already trained (the CPU recipe's pools in the committed store, the
    # shipped reference models of main-results): only the -rl children train
    main = experiment_keys(load_experiment("main-results", "cpu"), [])
    assert all(
        (ROOT / "results" / "models" / keys[m] / "done.json").is_file() for m in ("linear-bandit-100", "mab-100")
    )
    assert keys["queueing"] == main["queueing"] == "pretrained/queueing" and keys["pricing"] == main["pricing"]
    assert keys["newsvendor"] == "pretrained/newsvendor"
    assert len(set(keys.values())) == len(keys)

    # a changed parent (here its training length) gives its child, whose own spec is unchanged, a new key
    changed = replace(
        exp,
        models={
            **exp.models,
            "linear-bandit-100": replace(exp.models["linear-bandit-100"], args={"trainer.max_epochs": 61}),
        },
    )
    again = experiment_keys(changed, [])
    assert (
        again["linear-bandit-100"] != keys["linear-bandit-100"]
        and again["linear-bandit-100-rl"] != keys["linear-bandit-100-rl"]
    )
    assert again["mab-100-rl"] == keys["mab-100-rl"]
    # a re-shipped reference model (other weights, same name) retrains its children too
    card = store.read_card
    monkeypatch.setattr(store, "read_card", lambda folder, *a: {**card(folder, *a), "checksum": "sha256:other"})
    assert experiment_keys(exp, [])["queueing-rl"] != keys["queueing-rl"]
    monkeypatch.setattr(store, "read_card", card)

    # the fit starts from the parent's kept model.ckpt, wherever that lies; the slot is the same
    fits = []
    monkeypatch.setattr(
        store,
        "train",
        lambda folder, args, info, what: (
            fits.append((folder, args, info)) or {"train_seconds": 1, "best_val_regret": 1}
        ),
    )
    child = exp.models["linear-bandit-100-rl"]
    for where in ("a", "b"):
        parent = {"key": keys["linear-bandit-100"], "ckpt": str(tmp_path / where / "model.ckpt")}
        store.train_model(
            "linear-bandit-100-rl", child, scale="cpu", models_dir=tmp_path / "models", extra_configs=[], parent=parent
        )
    (first, args, info), (second, _, _) = fits
    assert first == second == tmp_path / "models" / keys["linear-bandit-100-rl"]
    assert args[-2:] == ["--model.finetune.init_from", str(tmp_path / "a" / "model.ckpt")]
    assert info["init_from"] == keys["linear-bandit-100"] and "--model.finetune.init_from" in info["command"]
    assert model_key(child, "cpu", []) != keys["linear-bandit-100-rl"]  # without its parent: another run
    # a shipped reference model as the parent: the child starts from pretrained/NAME/model.ckpt
    reference = store.pretrained_model("queueing", exp.models["queueing"])
    store.train_model(
        "queueing-rl",
        exp.models["queueing-rl"],
        scale="cpu",
        models_dir=tmp_path / "models",
        extra_configs=[],
        parent=reference,
    )
    folder, args, info = fits[-1]
    assert folder.name == keys["queueing-rl"] and args[-2:] == [
        "--model.finetune.init_from",
        "pretrained/queueing/model.ckpt",
    ]
    assert info["init_from"] == "pretrained/queueing"


@pytest.mark.parametrize("jobs", [1, 3])
def test_train_all_starts_a_child_only_after_its_parent_is_trained(jobs, monkeypatch):
    from omgpt.commands.experiment import models as store

    events, lock = [], threading.Lock()
    parents_started = threading.Barrier(2, timeout=10) if jobs > 1 else None

    def fake_train(name, model, *, scale, models_dir, extra_configs, parent=None):
        with lock:
            events.append(("start", name, parent and parent["key"]))
        if parents_started and name in ("a", "b"):
            parents_started.wait()  # with 3 workers both parents run at once
        with lock:
            events.append(("end", name, None))
        return {"key": f"key-{name}", "ckpt": f"{name}.ckpt"}

    monkeypatch.setattr(store, "train_model", fake_train)
    models = _parents(**{"a-rl": "a", "a": None, "b": None, "b-rl": "b", "a-rl-rl": "a-rl"})
    records = store.train_all(models, scale="cpu", models_dir=Path("unused"), extra_configs=[], jobs=jobs)
    assert list(records) == list(models) and records["a-rl"]["key"] == "key-a-rl"
    when = {(kind, name): i for i, (kind, name, _) in enumerate(events)}
    for child, parent in (("a-rl", "a"), ("b-rl", "b"), ("a-rl-rl", "a-rl")):
        assert when["end", parent] < when["start", child], events
        assert ("start", child, f"key-{parent}") in events  # given its parent's record
    assert ("start", "a", None) in events


def test_a_failed_parent_trains_none_of_its_children(monkeypatch):
    from omgpt.commands.experiment import models as store

    started = []

    def fake_train(name, *args, **kwargs):
        started.append(name)
        if name == "a":
            raise OMGPTError("training model 'a' failed")
        return {"key": name, "ckpt": name}

    monkeypatch.setattr(store, "train_model", fake_train)
    with pytest.raises(OMGPTError, match="model 'a' failed"):
        store.train_all(
            _parents(**{"a": None, "a-rl": "a"}), scale="cpu", models_dir=Path("unused"), extra_configs=[], jobs=2
        )
    assert started == ["a"]


def test_a_panel_the_kind_cannot_report_on_is_refused_before_any_training(tmp_path, monkeypatch, capsys):
    nv = {"task": "newsvendor"}
    models = {"m": nv, "m-rl": {**nv, "init_from": "m"}, "other": nv}
    for policies in (
        ["omgpt", "omgpt@m-rl", "erm"],  # no alg-star
        ["omgpt", "omgpt@other", "alg-star", "erm"],  # not a fine-tuning of the panel's model
        ["omgpt", "omgpt@m-rl", "omgpt@other", "alg-star", "erm"],  # two models beside the supervised one
        ["omgpt", "omgpt@m-rl", "alg-star"],
    ):  # no benchmark
        _experiment(
            tmp_path,
            monkeypatch,
            models,
            [{"title": "p", "model": "m", "policies": policies}],
            name="beyond-alg-star",
            settings=DECLARED,
        )
        assert (
            cli_main(
                [
                    "experiment",
                    "beyond-alg-star",
                    "--out",
                    str(tmp_path / "out"),
                    "--models-dir",
                    str(tmp_path / "models"),
                ]
            )
            == 2
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all("experiment beyond-alg-star: panel 'p': " in line for line in err), err
    assert (
        "plays omgpt (the supervised model), exactly one omgpt@NAME (its fine-tuned model) and alg-star"
        in err[0]
        == err[2]
    )
    assert "does not start from the panel's model 'm'" in err[1] and "plays no benchmark" in err[3]
    assert not (tmp_path / "models").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "settings,message",
    [
        ({}, "settings.claims must be {alg_star_beaten: [MODEL, ...]}, got None"),
        ({**DECLARED, "claims": {"alg_star_beaten": ["nobody"]}}, "'nobody' is no panel's model (m)"),
        ({**DECLARED, "selection": {"runs": 10}}, "settings.selection must be {runs: N, seed: S}"),
        ({**DECLARED, "selection": {"runs": 0, "seed": 10_100}}, "selection.runs must be an integer of at least 2"),
        ({**DECLARED, "selection": {"runs": 10, "seed": 6}}, "selection.seed 6 is not a validation seed"),
        (
            {**DECLARED, "verdicts": {}},
            "settings.verdicts is not a setting of kind beyond-alg-star (claims, selection)",
        ),
    ],
)
def test_the_claims_and_the_selection_rule_are_declared_before_the_run(
    tmp_path, monkeypatch, capsys, settings, message
):
    """Which panels a claim is about and the validation environments that keep a fine-tuned model are
    the config's, checked before any training: never read off the test numbers."""
    nv = {"task": "newsvendor"}
    panels = [{"title": "p", "model": "m", "policies": ["omgpt", "omgpt@m-rl", "alg-star", "erm"]}]
    _experiment(tmp_path, monkeypatch, {"m": nv, "m-rl": {**nv, "init_from": "m"}}, panels, "beyond-alg-star", settings)
    out, models = tmp_path / "out", tmp_path / "models"
    assert cli_main(["experiment", "beyond-alg-star", "--out", str(out), "--models-dir", str(models)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not models.exists() and not out.exists()


def test_a_kind_without_settings_refuses_them(tmp_path, monkeypatch, capsys):
    _experiment(tmp_path, monkeypatch, {"m": {"task": "newsvendor"}}, settings={"claims": {}})
    assert cli_main(["experiment", "dep", "--out", str(tmp_path / "out")]) == 2
    assert "settings.claims is not a setting of kind curves (none)" in capsys.readouterr().err


def test_the_claims_follow_the_declaration_not_the_test_numbers():
    """A panel the config names is judged by the 'below the best benchmark' claim even where, on the test
    environments, its best benchmark does not beat alg-star (queueing's ce above alg-star); one it does not
    name is judged by 'no worse than supervised' even where a benchmark happens to beat alg-star."""

    def panel(model, bench, star, kept_ci, diff_ci):
        numbers = {"mean": 1.0, "ci90": kept_ci, "runs": 10}
        return {
            "title": model, "model": model, "best_benchmark": {"name": "ce"},
            "benchmarks": ["ce"],
            "policies": {"ce": {"final_regret": {"mean": bench}}, "alg-star": {"final_regret": {"mean": star}},
                         "omgpt": {"final_regret": {"mean": 1.0}, "ratio_to_alg_star": {"mean": 1.0, "ci90": [0.9, 1.1]}}},
            "finetuning": {"selection": {"kept": "omgpt"}, "kept_versus_best": numbers,
                           "kept_minus_supervised": {"mean": 0.0, "ci90": diff_ci, "runs": 10},
                           "minus_supervised": {"mean": 0.0, "ci90": diff_ci, "runs": 10}},
        }  # fmt: skip

    from omgpt.commands.experiment.kinds.beyond_alg_star import BeyondAlgStar

    queueing = panel("queueing", bench=5.47, star=5.26, kept_ci=[1.0, 1.1], diff_ci=[0.0, 0.0])
    pricing = panel("pricing", bench=1.0, star=2.0, kept_ci=[1.2, 1.3], diff_ci=[-0.1, 0.1])
    result = {"name": "beyond-alg-star", "settings": {"claims": {"alg_star_beaten": ["queueing"]}}}
    [(beaten, holds, numbers), (elsewhere, fine, _)] = BeyondAlgStar().claims({**result, "panels": [queueing, pricing]})
    assert "declares: queueing" in beaten and not holds
    assert "on these test environments it does not beat alg-star" in numbers
    assert fine and "pricing" in _  # judged as declared: no worse than supervised
    with pytest.raises(RecordError, match="names no settings.claims"):
        BeyondAlgStar().claims({"name": "beyond-alg-star", "panels": [queueing]})


def test_the_fine_tuning_numbers_are_paired_over_the_same_environments():
    """Hand-computed: fine-tuned − supervised is the mean of the per-environment differences, its interval
    the bootstrap of those differences; the ratios are of the means over the same environments."""
    from omgpt.analysis.report import BOOTSTRAP_SAMPLES

    rng = np.random.default_rng(1)
    sup = rng.gamma(2.0, 3.0, 200)
    finals = {"omgpt": sup, "ft": sup - 1.0 + rng.normal(0, 0.5, 200), "best": sup + rng.normal(0, 4.0, 200)}
    numbers = finetuning_numbers(finals, "ft", "best")
    diff = finals["ft"] - sup
    assert numbers["minus_supervised"]["mean"] == pytest.approx(diff.mean())
    idx = np.random.default_rng(0).integers(0, 200, size=(BOOTSTRAP_SAMPLES, 200))
    assert numbers["minus_supervised"]["ci90"] == pytest.approx(np.percentile(diff[idx].mean(axis=1), [5, 95]).tolist())
    # paired: the common part of the regrets cancels, so the interval is far narrower than unpaired ones
    width = np.subtract(*numbers["minus_supervised"]["ci90"][::-1])
    assert width < 0.25 < 1.645 * 2 * sup.std() / np.sqrt(200)
    assert numbers["versus_best"]["mean"] == pytest.approx(finals["ft"].mean() / finals["best"].mean())
    assert numbers["minus_best"]["mean"] == pytest.approx((finals["ft"] - finals["best"]).mean())
    assert numbers["supervised_versus_best"]["mean"] == pytest.approx(sup.mean() / finals["best"].mean())
    assert numbers["versus_best"]["runs"] == numbers["minus_supervised"]["runs"] == 200

    def panel(ratio_ci, diff_ci):
        return {"finetuning": {"kept_versus_best": {"ci90": ratio_ci}, "kept_minus_supervised": {"ci90": diff_ci}}}

    assert below_best(panel([0.8, 0.99], [0, 1])) and not below_best(panel([0.8, 1.01], [0, 1]))
    assert not below_best(panel([0.8, None], [0, 1])) and not below_best(panel(None, None))
    assert worse(panel(None, [0.01, 1])) and not worse(panel(None, [-0.01, 1])) and not worse(panel(None, None))


@pytest.mark.slow
def test_beyond_alg_star_runs_end_to_end_from_the_parents_weights(tmp_path, monkeypatch, capsys):
    """The linear-bandit setting of the real config (its supervised model, without the CPU scale's longer
    training, and its pathwise child), tiny and at T = 6, through ``omgpt experiment``: the child is
    trained after its parent and from its weights (two AdamW steps at 1e-4 move no weight by more than
    ~2e-4, where a fresh network is ~1e-1 away), the report's numbers are those of the per-environment
    final regrets of the same rollouts, and ``--redraw`` rebuilds the report from experiment.json alone
    (and refuses a damaged one in one line). The panel plays ``random`` as its benchmark: the tuned
    LinUCB / LinTS would be tuned first at T = 6, which the test need not wait for."""
    from omgpt.commands.experiment import config
    from omgpt.commands.experiment.kinds.beyond_alg_star import BeyondAlgStar
    from omgpt.module import OMGPTModule

    real = yaml.safe_load((ROOT / "configs/experiments/beyond-alg-star.yaml").read_text())
    real["models"] = {
        "linear-bandit-100": {**real["models"]["linear-bandit-100"], "cpu": {}},
        "linear-bandit-100-rl": real["models"]["linear-bandit-100-rl"],
    }
    real["panels"] = [
        {**p, "policies": ["omgpt", "omgpt@linear-bandit-100-rl", "alg-star", "random"]}
        for p in real["panels"]
        if p["model"] == "linear-bandit-100"
    ]
    real["settings"]["claims"]["alg_star_beaten"] = ["linear-bandit-100"]
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "beyond-alg-star.yaml").write_text(yaml.safe_dump(real))
    monkeypatch.setattr(config, "EXPERIMENTS", tmp_path / "experiments")
    played = {}

    def rollout(self, panel, models, *, runs, seed, device):
        numbers, histories = super(BeyondAlgStar, self).rollout(panel, models, runs=runs, seed=seed, device=device)
        played.update(histories)
        return numbers, histories

    monkeypatch.setattr(BeyondAlgStar, "rollout", rollout)
    out, models_dir = tmp_path / "out", tmp_path / "models"
    args = [
        "experiment",
        "beyond-alg-star",
        "--fit-config",
        TINY,
        "--horizon",
        "6",
        "--runs",
        "40",
        "--out",
        str(out),
        "--models-dir",
        str(models_dir),
    ]
    assert cli_main(args) == 0
    console = capsys.readouterr().out
    assert console.index("linear-bandit-100: training") < console.index("linear-bandit-100-rl: training")
    result = json.loads((out / "experiment.json").read_text())
    assert result["figures"] == ["finetuning.png", "regret.png"] and (out / "finetuning.png").stat().st_size > 10_000

    # the child started from its parent's kept weights
    parent, child = result["models"]["linear-bandit-100"], result["models"]["linear-bandit-100-rl"]
    assert child["init_from"] == parent["key"] and f"--model.finetune.init_from {parent['ckpt']}" in child["command"]
    theta0, theta = (read_checkpoint(models_dir / r["key"] / "model.ckpt")["state_dict"] for r in (parent, child))
    moved = max(float((theta[k] - theta0[k]).abs().max()) for k in theta0)
    assert child["steps"] == 2 and 0 < moved < 5e-4
    hp = read_checkpoint(models_dir / parent["key"] / "model.ckpt")["hyper_parameters"]
    fresh = OMGPTModule(**{k: hp[k] for k in ("task", "task_options", "horizon", "network")}).state_dict()
    assert max(float((fresh[k] - theta0[k]).abs().max()) for k in theta0) > 1e-2  # the bound can tell

    # the numbers are those of the same rollouts' per-environment final regrets
    [panel] = result["panels"]
    f, best = panel["finetuning"], panel["best_benchmark"]["name"]
    final = {k: h.cumulative_regret()[:, -1].double().numpy() for k, h in played.items()}
    ft, sup = final["linear-bandit-100-rl"], final["omgpt"]
    assert (
        best == "random" and f["finetuned"]["label"] == "linear-bandit-100-rl" and f["supervised"]["label"] == "omgpt"
    )
    assert (ft != sup).any()  # the fine-tuned model acts otherwise (continuous actions: any step changes them)
    assert f["minus_supervised"]["mean"] == pytest.approx((ft - sup).mean(), rel=1e-9, abs=1e-12)
    assert f["versus_best"]["mean"] == pytest.approx(ft.mean() / final[best].mean())
    assert f["minus_best"]["mean"] == pytest.approx((ft - final[best]).mean(), rel=1e-9)
    assert panel["policies"]["linear-bandit-100-rl"]["final_regret"]["mean"] == pytest.approx(ft.mean())
    assert f["finetuned"]["val_regret"] == child["val_regret"] and f["finetuned"]["steps"] == 2
    assert f["supervised"]["seconds"] == (parent.get("cpu_seconds") or parent["train_seconds"]) > 0

    # the model kept is the one of lower mean regret on the selection's validation environments, and the
    # verdicts are its numbers on the test environments
    sel = f["selection"]
    kept = "linear-bandit-100-rl" if sel["finetuned"] < sel["supervised"] else "omgpt"
    assert sel["kept"] == kept and sel == {**sel, **real["settings"]["selection"]}
    assert sel["finetuned_minus_supervised"]["mean"] == pytest.approx(
        sel["finetuned"] - sel["supervised"], rel=1e-9, abs=1e-12
    )
    assert f["kept_versus_best"]["mean"] == pytest.approx(final[kept].mean() / final[best].mean())
    assert f["kept_minus_supervised"]["mean"] == pytest.approx((final[kept] - sup).mean(), rel=1e-9, abs=1e-12)

    report = (out / "report.md").read_text()
    assert "## Fine-tuning on regret" in report and "![finetuning](finetuning.png)" in report
    ratio = f["kept_versus_best"]
    below = ratio["ci90"][1] < 1
    assert below_best(panel) == below
    assert (
        f"the kept OMGPT ({kept}) {final[kept].mean():.2f} is {'below' if below else 'NOT below'} the best benchmark "
        f"({final[best].mean():.2f}, random): {kept} / random {ratio['mean']:.2f} [{ratio['ci90'][0]:.2f}, {ratio['ci90'][1]:.2f}], "
        f"the interval {'lies' if below else 'does not lie'} below 1"
    ) in report
    # the declared panel is judged by the first claim, and the report says random does not beat alg-star there
    assert "where a tuned benchmark beats alg-star (the panels the config declares: Linear bandit" in report
    assert "on these test environments it does not beat alg-star" in report
    assert "elsewhere fine-tuning" not in report  # no panel left undeclared

    (out / "finetuning.png").unlink()
    assert cli_main(["experiment", "beyond-alg-star", "--redraw", "--out", str(out)]) == 0
    assert (out / "report.md").read_text() == report and (out / "finetuning.png").is_file()
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    result["panels"][0]["finetuning"]["finetuned"]["label"] = "nobody"
    (damaged / "experiment.json").write_text(json.dumps(result))
    capsys.readouterr()
    assert cli_main(["experiment", "beyond-alg-star", "--redraw", "--out", str(damaged)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "finetuning.finetuned.label': 'nobody' is not one of the panel's policies" in err[0]
