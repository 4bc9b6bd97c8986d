"""Model folders: ``pretrained/<name>/`` (or any folder) stands for the ``model.ckpt`` inside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from omgpt.commands.cli import cli_main
from omgpt.module import OMGPTModule, load_module


def test_a_folder_loads_its_model_ckpt(tmp_path):
    torch.manual_seed(0)
    module = OMGPTModule(
        task="newsvendor",
        horizon=6,
        network=dict(n_layer=1, n_head=2, n_embd=8, layout="compact", pos_encoding="rope"),
    )
    folder = tmp_path / "newsvendor"
    folder.mkdir()
    # weights and hyper-parameters only: what a shipped reference model holds
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, folder / "model.ckpt")
    loaded = load_module(str(folder))
    assert loaded.model.cfg.layout == "compact" and loaded.model.cfg.pos_encoding == "rope"
    for (name, a), (_, b) in zip(module.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.parent.name for p in (ROOT / "pretrained").glob("*/card.json"))


def test_every_shipped_model_has_its_config_and_is_small():
    configs = {p.stem for p in (ROOT / "configs" / "pretrained").glob("*.yaml")}
    for name in SHIPPED:
        source = json.loads((ROOT / "pretrained" / name / "card.json").read_text()).get("adopted_from")
        if source:  # a fine-tuned model adopted from the run store: its record there says how to retrain it
            record = json.loads((ROOT / "results" / "models" / source["store_key"] / "done.json").read_text())
            assert (
                record["model"] == source["model"]
                and (ROOT / "results" / "models" / source["init_from"] / "model.ckpt").is_file()
            )
        else:
            assert name in configs, f"pretrained/{name} has no configs/pretrained/{name}.yaml to retrain it"
        ckpt = ROOT / "pretrained" / name / "model.ckpt"
        assert ckpt.stat().st_size <= 10e6
        assert set(torch.load(ckpt, map_location="cpu", weights_only=True)) <= {
            "state_dict",
            "hyper_parameters",
            "global_step",
        }


@pytest.mark.parametrize("name", SHIPPED)
def test_a_reference_model_reproduces_its_cards_spot_check(name, tmp_path):
    """``omgpt evaluate --ckpt pretrained/NAME`` on the card's spot-check environments (10 runs, its
    seed) gives the card's mean final regret: the shipped weights are the ones the card measured."""
    card = json.loads((ROOT / "pretrained" / name / "card.json").read_text())
    spot = card["spot_check"]
    out = tmp_path / "spot"
    options = [
        a for k, v in spot.get("task_options", {}).items() for a in ("--option", f"{k}={v}")
    ]  # a data set's test windows
    assert (
        cli_main(
            [
                "evaluate",
                "--ckpt",
                str(ROOT / "pretrained" / name),
                *options,
                "--policies",
                "omgpt",
                "--runs",
                str(spot["runs"]),
                "--seed",
                str(spot["seed"]),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    got = json.loads((out / "summary.json").read_text())["policies"]["omgpt"]["final_regret"]["mean"]
    assert got == pytest.approx(spot["final_regret_mean"], rel=1e-4, abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["", *(["newsvendor"] if "newsvendor" in SHIPPED else [])])
def test_the_quickstart_notebook_runs(model, tmp_path, monkeypatch):
    """analysis/notebooks/quickstart.ipynb end to end: on the shipped newsvendor model, and with no model
    (it pre-trains a tiny one). It draws its figure, and with the shipped model OMGPT beats the benchmarks."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "analysis/notebooks/quickstart.ipynb", as_version=4)
    monkeypatch.setenv("OMGPT_QUICKSTART_MODEL", str(ROOT / "pretrained" / model) if model else "")
    monkeypatch.setenv("OMGPT_QUICKSTART_RUNS", "20")
    monkeypatch.setenv("OMGPT_QUICKSTART_OUT", str(tmp_path))
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert (tmp_path / "quickstart.png").is_file()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    finals = {
        line.split(":")[0].strip(): float(line.split()[3]) for line in printed.splitlines() if "final regret" in line
    }
    assert {"omgpt", "erm", "fai", "oracle"} <= set(finals)
    if model:
        assert finals["omgpt"] < min(finals["erm"], finals["fai"]), finals


def replicates(first: dict, again: dict) -> bool:
    """Whether two ratios measured on independent environments (a card's test and its replication)
    agree: the 90% interval of their quotient, from each interval read as a normal spread of the log
    ratio, holds 1 (|z| < 1.645). Two intervals that merely overlap allow a gap up to ~1.4 times wider.
    An interval open above is read as twice its estimate's distance to its lower end (a wide spread:
    that test agrees more easily, and says so by its width)."""
    import math

    def log_spread(r):
        lo, hi = r["ci90"]
        hi = hi if hi is not None else r["mean"] ** 2 / lo
        return math.log(r["mean"]), (math.log(hi) - math.log(lo)) / (2 * 1.6449)

    (m1, s1), (m2, s2) = log_spread(first), log_spread(again)
    return abs(m1 - m2) / math.hypot(s1, s2) < 1.6449


def test_replication_is_an_interval_of_the_quotient_not_an_overlap():
    """Hand-computed: 1.07 [1.05, 1.08] against 1.07 [1.06, 1.08] agree; 1.07 [1.05, 1.09] against
    1.13 [1.11, 1.15] overlap nowhere and do not; 1.00 [0.90, 1.10] against 1.16 [1.06, 1.26] overlap
    (1.06-1.10) yet z = 0.148 / 0.0833 = 1.78 > 1.645: an overlap is not a replication."""
    r = lambda mean, lo, hi: {"mean": mean, "ci90": [lo, hi]}  # noqa: E731
    assert replicates(r(1.07, 1.05, 1.08), r(1.07, 1.06, 1.08))
    assert not replicates(r(1.07, 1.05, 1.09), r(1.13, 1.11, 1.15))
    assert not replicates(r(1.00, 0.90, 1.10), r(1.16, 1.06, 1.26))


def _has_alg_star(name: str) -> bool:
    from omgpt.model import load_model
    from omgpt.policies import policies_for

    return "alg-star" in policies_for(load_model(ROOT / "pretrained" / name).task)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_card_is_measured_on_fresh_unburned_test_environments(name):
    """docs/protocol.md: a card's test and replication seeds are test seeds that chose nothing (not
    burned); a prior's card plays >= 1,000 environments, a data set's every test window once."""
    from omgpt.model import load_model
    from omgpt.seeding import BURNED_SEEDS, TEST_SEEDS
    from omgpt.tasks import make_episode_task

    card = json.loads((ROOT / "pretrained" / name / "card.json").read_text())
    task = load_model(ROOT / "pretrained" / name).task
    seeds = [card["test"]["seed"]] + ([card["replication"]["seed"]] if card.get("replication") else [])
    assert all(s in TEST_SEEDS and s not in BURNED_SEEDS for s in seeds), (seeds, sorted(BURNED_SEEDS))
    if getattr(task.validation_task(), "windows", None) is not None:  # a data set: every test window once
        test = make_episode_task(task.name, {**task.options(), **card["spot_check"]["task_options"]}, card["horizon"])
        assert card["test"]["runs"] == test.windows
    else:
        assert card["test"]["runs"] >= 1000
    if not _has_alg_star(name):  # no Bayes-optimal reference: no ratio is invented
        assert card.get("ratio_to_alg_star") is None and card.get("replication") is None


@pytest.mark.parametrize("name", [n for n in SHIPPED if _has_alg_star(n)])
def test_a_cards_ratio_to_alg_star_is_paired_and_replicates(name):
    """Where ``alg-star`` applies, the card's OMGPT / alg-star ratio is paired over >= 1,000 fresh test
    environments, and its replication on another test seed agrees with it (:func:`replicates`)."""
    card = json.loads((ROOT / "pretrained" / name / "card.json").read_text())
    ratio, again = card["ratio_to_alg_star"], card["replication"]
    assert ratio["runs"] >= 1000 and ratio["seed"] == card["test"]["seed"] and ratio["mean"] > 0
    assert again["runs"] == ratio["runs"] and again["seed"] != ratio["seed"]
    assert replicates(ratio, again), (ratio, again)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_card_renders_again_byte_for_byte_from_its_card_json(name, tmp_path):
    """card.md is written from card.json alone (``render``, ``retest``): a paragraph added to card.md by
    hand -- the bakery-time card's account of which windows decided it -- would be lost on the next
    render, so it belongs in card.json (``provenance``)."""
    from tools.reference_models import write_card

    shipped = ROOT / "pretrained" / name
    write_card(json.loads((shipped / "card.json").read_text()), tmp_path)
    assert (tmp_path / "card.md").read_text() == (shipped / "card.md").read_text()


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_model_has_its_resolved_config_beside_it(name):
    """pretrained/NAME/config.yaml is the whole run in one file: what ``--print_config`` resolves from
    the card's training command today, every default filled in (the lightning version comment aside),
    and it names the model's task and horizon."""
    import yaml

    from tools.reference_models import resolved_config

    card = json.loads((ROOT / "pretrained" / name / "card.json").read_text())
    committed = yaml.safe_load((ROOT / "pretrained" / name / "config.yaml").read_text())
    assert committed == yaml.safe_load(resolved_config(card["command"])), "python -m tools.reference_models config NAME"
    assert committed["model"]["task"] == card["task"] and committed["model"]["horizon"] == card["horizon"]
