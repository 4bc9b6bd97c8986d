"""The hard priors' lever study: which change to the CPU recipe buys the most quality per CPU-minute.

    python benchmarks/lever_study.py SETTING [--arms NAME,...] [--dry-run]
    python benchmarks/lever_study.py --list

One ``benchmarks/time_to_quality.py`` run per SETTING (a 100-environment pool, or demand prediction's
single demand type), its arms the CPU recipe (``configs/scale/cpu.yaml`` at the length the experiments
train that setting) and one change at a time:

* ``steps``: the same recipe over more epochs (its cosine schedule laid out over them);
* ``size-8x128``: 8 layers of width 128 instead of 4 of 64 (the paper's 12 x 256 is ~40x the step's CPU:
  about 300 steps in an hour here, so it is a GPU's point of comparison, benchmarks/RESULTS.md);
* ``posterior``: the posterior-weighted target (``model.target: posterior``; on demand prediction the
  observation head's noise-free target, ``model.obs_target: mean``);
* ``noisy-oracle``: the paper's early-phase data policy instead of the CPU scale's random actions;
* ``finetune``: regret fine-tuning (``configs/finetune/regret.yaml``) from the recipe's own kept
  checkpoint, its clock starting where the recipe's training ended;
* ``transfer``: the recipe started from the weights of a model of the same task on a wider prior (the
  full-prior reference model a pool is drawn from; for demand prediction's single type, the two-type
  model), with its architecture (pricing's reference model has 6 layers, not 4): the parent's own
  training CPU is stated beside the arm (``parent_cpu_minutes``), so its curve reads with and without it;
* ``bayes-action-steps-xN`` (queueing): the target whose Bayes decision is the best rate on the grid
  (``model.target bayes_action``) over the steps arm's length;
* ``curriculum``: the paper's horizon curriculum in the early phase (``T~`` = 20, 40, ..., 100, one epoch
  each, twice over, then the whole horizon from epoch 10): early steps on short histories cost less.

Curves are on the validation environments of seed 10,000 (what every fit validates on); each arm's kept
checkpoint is then played with ``alg-star`` on 200 environments of validation seed 10,003 (paired 90%
intervals). Revenue management and queueing measure against their best benchmark instead (Ada, ``ce``:
``alg-star`` is missing, or beaten by ``ce``). No test seed is touched: the study chooses the retrains' recipes. It writes
``benchmarks/levers/SETTING.json`` and ``.png`` (committed) and keeps the arms' runs in
``runs/levers/SETTING``; run again, it reuses every arm that finished (``--resume``), so a study longer
than a session is run again until done. Every arm runs on one thread; the clock is CPU time.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from omgpt.entry import Names, entry_point, script_parser  # noqa: E402
from omgpt.errors import OMGPTError  # noqa: E402
from omgpt.files import write_json  # noqa: E402
from omgpt.records import read_json  # noqa: E402

# Each setting: the task and its options, the epochs the experiments train it (alg-star-match's and
# demand-prediction's CPU configs), the steps arm's epochs (as long as fits the largest budget), and
# what quality is measured against.
SETTINGS = {
    # Discrete arms carry no pathwise gradient: its fine-tuning is REINFORCE (as beyond-alg-star's mab-100-rl).
    "mab-100": {
        "task": "mab",
        "options": "{pool_size: 100}",
        "epochs": 60,
        "steps_epochs": 120,
        "finetune": "--model.finetune.estimator score",
    },
    "pricing-100": {
        "task": "pricing",
        "options": "{pool_size: 100}",
        "epochs": 30,
        "steps_epochs": 120,
        "parent": ("pretrained/pricing", "--model.network.n_layer 6"),
    },
    "newsvendor-100": {
        "task": "newsvendor",
        "options": "{pool_size: 100}",
        "epochs": 30,
        "steps_epochs": 120,
        "parent": ("pretrained/newsvendor", ""),
    },
    "pricing-16": {  # prior-benefit's 16 environments of two demand types
        "task": "pricing",
        "options": "{pool_size: 16, demand_types: mixed}",
        "epochs": 30,
        "steps_epochs": 120,
        "parent": ("pretrained/pricing", "--model.network.n_layer 6"),
    },
    "demand-single": {
        "task": "pricing",
        "options": "{dim: 4}",
        "epochs": 60,
        "steps_epochs": 120,  # not 180: its schedule must end inside the 60-minute cap, not be cut mid-cosine
        "extra": "--model.network.obs_head true",
        "random_actions": '--data.data_policy_options "{high: 3.0}"',  # the random policy's range (not f~'s)
        "metric": "obs-mse",
        "parent": ("results/models/pricing-e62674581b", ""),  # demand-prediction's two-type CPU-recipe model
    },
    # The two main-results tasks without alg-star to measure against (revenue) or where a benchmark beats
    # it (queueing: ce): the ratio is to that benchmark's validation regret (time_to_quality --reference).
    # The recipe is the reference card's (configs/pretrained/): its length and mixed phase's start.
    "revenue": {
        "task": "revenue",
        "options": "{}",
        "horizon": 50,
        "epochs": 60,
        "steps_epochs": 240,
        "reference": "ada",
        "only": ("cpu-recipe", "steps-x4", "size-8x128", "curriculum"),  # revenue has no posterior target
        "extra": '--data.algorithm1.mixed "{start_epoch: 30, rollouts: 640, kappa: 0.3333333333, batches_per_epoch: 100}"',
    },
    "queueing": {
        "task": "queueing",
        "options": "{}",
        "epochs": 40,
        "steps_epochs": 160,
        "reference": "ce",
        "only": ("cpu-recipe", "steps-x4", "size-8x128", "bayes-action-steps-x4", "curriculum"),
        "extra": '--data.algorithm1.mixed "{start_epoch: 20, rollouts: 640, kappa: 0.3333333333, batches_per_epoch: 100}"',
        # the target whose Bayes decision is the best rate on the grid (results/queueing-target), with the steps arm's length
        "bayes_action": True,
    },
}
# The paper's curriculum compressed to the CPU recipe's length: T~ = 20 (m - 1) % 5 + 20 for epochs
# 0-9, the whole horizon after (datamodules/algorithm1.py's HorizonCurriculum).
CURRICULUM = (
    '--data.algorithm1.curriculum "{stage_epochs: 1, restart_epochs: [], full_from_epoch: 10}" '
    "--trainer.callbacks+=omgpt.callbacks.Curriculum"
)
BUDGETS = "15,30,60"  # CPU-minutes; the largest caps every arm
TARGETS = {"regret": "2,1.5,1.25", "obs-mse": "4,2,1"}  # x alg-star's regret; x ridge's MSE


def arms(name: str) -> dict[str, str]:
    """The study's arms for one setting: arm name -> ``CONFIG OVERRIDES`` (time_to_quality's --arm)."""
    s = SETTINGS[name]
    setting = " ".join(
        filter(
            None,
            [
                f'configs/scale/cpu.yaml --model.task {s["task"]} --model.task_options "{s["options"]}"',
                f"--model.horizon {s.get('horizon', 100)}",
                s.get("extra"),
            ],
        )
    )
    random = f" {s['random_actions']}" if s.get("random_actions") else ""
    base = f"{setting}{random} --trainer.max_epochs {s['epochs']}"
    obs = s.get("metric") == "obs-mse"
    out = {
        "cpu-recipe": base,
        f"steps-x{s['steps_epochs'] // s['epochs']}": f"{setting}{random} --trainer.max_epochs {s['steps_epochs']}",
        "size-8x128": f"{base} --model.network.n_layer 8 --model.network.n_embd 128",
        (
            "obs-mean" if obs else "posterior"
        ): f"{base} {'--model.obs_target mean' if obs else '--model.target posterior'}",
        "noisy-oracle": f"{setting} --trainer.max_epochs {s['epochs']} --data.data_policy noisy-oracle",
    }
    if s.get("parent"):
        parent, network = s["parent"]
        out["transfer"] = " ".join(filter(None, [base, network, f"--model.finetune.init_from {parent}"]))
    out["curriculum"] = f"{base} {CURRICULUM}"
    if s.get("bayes_action"):
        out[f"bayes-action-steps-x{s['steps_epochs'] // s['epochs']}"] = (
            f"{setting}{random} --trainer.max_epochs {s['steps_epochs']} --model.target bayes_action"
        )
    if not obs:  # fine-tuning lowers regret; the head's error is not its objective
        finetune = " ".join(filter(None, ["--config configs/finetune/regret.yaml", s.get("finetune")]))
        out["finetune"] = f"{base} {finetune} --from=cpu-recipe"
    return {k: v for k, v in out.items() if k in s.get("only", out)}


def command(name: str, chosen: list[str] | None = None) -> list[str]:
    """time_to_quality's arguments for one setting (``chosen``: a subset of the arms, in study order)."""
    s, table = SETTINGS[name], arms(name)
    unknown = sorted(set(chosen or []) - set(table))
    if unknown:
        raise OMGPTError(f"--arms: unknown arm(s) {', '.join(unknown)}; the arms of {name}: {', '.join(table)}")
    picked = [a for a in table if not chosen or a in chosen]
    if "finetune" in picked and "cpu-recipe" not in picked:
        raise OMGPTError("--arms: finetune starts from cpu-recipe; name both")
    metric = s.get("metric", "regret")
    argv = [x for a in picked for x in ("--arm", f"{a}={table[a]}")]
    argv += ["--metric", metric, "--budgets", BUDGETS, "--eval-every", "60", "--target", TARGETS[metric]]
    if metric == "regret":
        argv += ["--holdout-runs", "200", "--holdout-seed", "10003", "--reference", s.get("reference", "alg-star")]
    out = ROOT / "benchmarks" / "levers"
    argv += ["--out", str(ROOT / "runs" / "levers" / name), "--resume"]
    argv += ["--json", str(out / f"{name}.json"), "--plot", str(out / f"{name}.png")]
    return argv


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = script_parser(__file__, __doc__)
    p.add_argument("setting", nargs="?", choices=sorted(SETTINGS))
    every_arm = sorted({arm for name in SETTINGS for arm in arms(name)})
    p.add_argument("--arms", type=Names(every_arm), help="only these arms (comma-separated)")
    p.add_argument("--list", action="store_true", help="print every setting's arms and exit")
    p.add_argument("--dry-run", action="store_true", help="print the time_to_quality command and exit")
    args = p.parse_args(argv)
    if args.list:
        for name in SETTINGS:
            print(name)
            for arm, spec in arms(name).items():
                print(f"  {arm}: {spec}")
        return 0
    if args.setting is None:
        raise OMGPTError("name a setting (--list shows them)")
    ttq = command(args.setting, args.arms.split(",") if args.arms else None)
    if args.dry_run:
        print(shlex.join(["python", "benchmarks/time_to_quality.py", *ttq]))
        return 0
    (ROOT / "benchmarks" / "levers").mkdir(exist_ok=True)
    import time_to_quality

    path = ROOT / "benchmarks" / "levers" / f"{args.setting}.json"
    before = read_json(path, {"arms": list}, what="lever study") if path.is_file() else None
    code = time_to_quality.main(ttq)
    if path.is_file():
        write_json(merged(before, read_json(path, {"arms": list}, what="lever study"), args.setting), path, indent=1)
    return code


def merged(before: dict | None, now: dict, setting: str) -> dict:
    """The study's record after a run of some of its arms: the arms run now, then every arm of the
    earlier record that was not run again (measured on the same validation and held-out environments;
    their held-out ratios are to the same alg-star, their pairing to this run's recipe is not), and the
    transfer arm's parent with its own training CPU (its curve reads with and without it)."""
    ran = {a["arm"] for a in now["arms"]}
    kept = [a for a in (before or {}).get("arms", []) if a["arm"] not in ran]
    record = {**now, "arms": now["arms"] + kept}
    if "transfer" in ran:
        parent = SETTINGS[setting]["parent"][0]
        record["parent"] = {"model": parent, "cpu_minutes": parent_cpu_minutes(ROOT / parent)}
    return record


def parent_cpu_minutes(folder: Path) -> float:
    """A reference model's training CPU-minutes (its card), or a store model's (its done.json)."""
    card = folder / "card.json"
    if card.is_file():
        return float(read_json(card, {"cpu_minutes": (int, float)}, what="card")["cpu_minutes"])
    done = read_json(folder / "done.json", {"cpu_seconds": (int, float)}, what="run record")
    return round(done["cpu_seconds"] / 60, 1)


if __name__ == "__main__":
    sys.exit(main())
