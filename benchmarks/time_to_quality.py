"""Time to quality: CPU-seconds of training until a model is within 1.25x (or 2x, 1.5x ...) of ``alg-star``.

    python benchmarks/time_to_quality.py [--arm NAME=CONFIG [OVERRIDE ...]] ... [--budgets 2,5,10]
        [--quick] [--target 2,1.5,1.25] [--eval-every 10] [--threads 1] [--val-runs 128] [--val-seed 10000]
        [--seed 0] [--holdout-runs 100 --holdout-seed 10003] [--out runs/time_to_quality] [--json FILE]
        [--plot FILE.png] [--metric regret|obs-mse] [--resume]
    python benchmarks/time_to_quality.py --checkpoint NAME=CKPT ... --holdout-runs 100 --holdout-seed 5

What a user waits for is not steps per second but a good model. Each ARM is one training recipe: an
``omgpt fit`` config (``configs/demo.yaml``: the full newsvendor prior at T = 50) and optional fit
overrides, e.g. ``--arm "bf16=configs/demo.yaml --trainer.precision=bf16-mixed"`` or, for a recipe that
names no task, ``--arm "cpu=configs/scale/cpu.yaml --model.task pricing --model.task_options
{pool_size: 100} --model.horizon 100"`` (every arm trains the same setting); four benchmark knobs
may sit among the overrides: ``--compile`` (``torch.compile`` the network before training),
``--sdpa=math`` (attention through PyTorch's reference path, not the fused kernel), ``--threads=N``
(this arm's intra-op threads; default ``--threads``) and ``--from=ARM``: fine-tune from an earlier
arm's kept checkpoint (``model.finetune.init_from``, e.g. with ``--config configs/finetune/regret.yaml``
among the overrides), its clock starting where that arm's training ended. Without ``--arm`` the run compares the demo's
earlier recipe, four heads and 3,000 steps at a peak learning rate of 1e-3
(``benchmarks/demo_3000_steps_lr1e-3.yaml``), with ``configs/demo.yaml``.

Every arm trains in its own process, one after the other (never two at once: the numbers are CPU
time, but two trainings would still slow each other's caches), through the same LightningCLI as
``omgpt fit`` with its own schedule, until the recipe ends or its training CPU time passes the largest
budget. The clock is the CPU time of the training process and its DataLoader workers (so it reads the
same on a shared machine: with one thread it is the wall-clock the run takes on an idle core), minus
the time spent in validation -- the recipe's own and the benchmark's. Every ``--eval-every`` CPU-seconds
of training, and as soon as each budget is spent, the benchmark plays the current network (eval mode,
KV-cached rollouts) on the fixed validation environments (``--val-runs`` from ``--val-seed``, a
validation seed: ``omgpt.seeding.VALIDATION_SEEDS``; the very episodes ``OMGPTModule`` validates on)
and divides its mean final regret by ``alg-star``'s on the same episodes. ``alg-star`` plays them once;
its regret is kept in ``--out`` under a key of the environments themselves and reused by later runs.

It prints, per arm: the training CPU-minutes at the first evaluation whose ratio is at most each
``--target``, the best ratio seen and when, and the ratio after each budget, all measured in this one
run; ``--plot`` draws the curves. An arm's trace in ``--out`` is named by everything that decides it,
and ``--resume`` reuses every finished one and goes on with a stopped one from its last checkpoint (its
clock and evaluations travel in it), so a study longer than a session is run again until done. ``--metric obs-mse`` measures demand prediction instead: the
observation head's squared error against the expected observation after ``T - 1`` samples, over
ridge's on the same samples, on the model's own rollouts of the validation environments (the arms
train with ``--model.network.obs_head true``). ``--holdout-runs N`` then plays every arm's
checkpoint (the recipe's checkpoint rule: what ``omgpt demo`` plays) and ``alg-star`` on the same ``N``
held-out environments of ``--holdout-seed`` and prints each arm's ratio to ``alg-star`` and to the first arm,
with paired bootstrap 90% intervals. ``--checkpoint NAME=CKPT`` (repeatable) skips the training and
plays those checkpoints that way: the report of a choice already made, so ``--holdout-seed`` may then
be a test seed (``omgpt.seeding.TEST_SEEDS``, the demo's own ``DEMO_SEED`` for instance). ``--quick``:
budgets of 1 and 2 minutes and an evaluation every 5 CPU-seconds (a smoke run; its figures are not the
benchmark's).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from torch.nn.attention import SDPBackend, sdpa_kernel

from omgpt.checkpoints import read_checkpoint
from omgpt.entry import (
    Checkpoint,
    Integer,
    Named,
    Numbers,
    OutputFile,
    OutputFolder,
    Real,
    ScriptParser,
    Seed,
    Text,
    entry_point,
    script_parser,
)
from omgpt import records
from omgpt.errors import OMGPTError
from omgpt.records import NUMBER, ListOf, RecordError
from omgpt.files import write_json, write_text

ROOT = Path(__file__).resolve().parents[1]
# The resample-move particles: the sampler every figure of benchmarks/RESULTS.md's "Time to quality" was
# measured with (the 1.25x threshold and the paired ratios); alg-star's default is "auto" since 2026-11-28.
ALG_STAR = {"sampler": "smc"}


def reference_policy(name: str) -> tuple[str, dict]:
    """``--reference`` as a policy and its options: ``alg-star`` with its sampler, a benchmark as it is
    (a task without ``alg-star`` -- revenue management, or queueing, where ``ce`` beats it -- measures
    its arms against its best benchmark on validation)."""
    return name, ALG_STAR if name == "alg-star" else {}


DEFAULT_ARMS = ["3000-steps=benchmarks/demo_3000_steps_lr1e-3.yaml", "demo=configs/demo.yaml"]
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its children, ended or alive: the history
    generation of DataLoader workers is training time too. Live children are read from /proc (Linux)."""
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    alive = 0.0
    for tasks in Path("/proc/self/task").glob("*/children"):
        for pid in tasks.read_text().split():
            try:  # fields 14 and 15 after the command name: utime, stime (clock ticks)
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                alive += (int(fields[11]) + int(fields[12])) / TICK
            except (OSError, IndexError, ValueError):
                pass  # ended meanwhile: reaped, it is in RUSAGE_CHILDREN next time
    return time.process_time() + ended.ru_utime + ended.ru_stime + alive


def validation_regret(task, envs: dict, policy_for, horizon: int, val_seed: int, batch: int) -> float:
    """Mean final regret of a policy on the validation environments, played in batches of ``batch``
    with each batch's own seed, exactly as ``OMGPTModule.validation_step`` plays them."""
    from omgpt.module import validation_rollout

    runs = next(iter(envs.values())).shape[0]
    finals = [
        validation_rollout(task, envs, idx, policy_for(), horizon, val_seed).cumulative_regret()[:, -1]
        for idx in torch.arange(runs).split(batch)
    ]
    return float(torch.cat(finals).mean())


def validation_obs_errors(task, envs: dict, model, horizon: int, val_seed: int, batch: int) -> tuple[float, float]:
    """The observation head's and ridge's mean squared error against the expected observation after
    ``T - 1`` samples, on the model's own rollouts of the validation environments (both read the same
    samples): what ``val/obs_mse`` and demand prediction's report call the error after ``T - 1``."""
    from omgpt.module import validation_rollout
    from omgpt.policies import make_policy
    from omgpt.rollout import mean_observations

    from analysis.observation_head import ridge_predictions

    runs, last = next(iter(envs.values())).shape[0], horizon - 1
    head, ridge = [], []
    for idx in torch.arange(runs).split(batch):
        history = validation_rollout(task, envs, idx, make_policy("omgpt", task, model=model), horizon, val_seed)
        expected = mean_observations(task, history)[:, last, 0].double()
        head.append(model.predict_observations(*history.tokens())[:, last, 0].double() - expected)
        fitted = ridge_predictions(
            *(v.double().numpy() for v in (history.contexts, history.actions, history.observations)), samples=[last]
        )
        ridge.append(torch.from_numpy(fitted[:, last]) - expected)
    return float(torch.cat(head).pow(2).mean()), float(torch.cat(ridge).pow(2).mean())


class QualityClock(Callback):
    """Keeps the training CPU clock of one arm (validation excluded), evaluates the network on the
    validation environments every ``eval_every`` CPU-seconds and at every budget, stops the fit after
    the last budget and writes the trace (``out``, JSON)."""

    def __init__(
        self,
        out: str,
        alg_star: float | None,
        budgets: list[float],
        eval_every: float,
        val_runs: int,
        val_seed: int,
        val_batch: int,
        compile: bool = False,
        sdpa: str | None = None,
        metric: str = "regret",
    ):
        self.metric = metric
        self.out, self.alg_star, self.budgets, self.eval_every = out, alg_star, sorted(budgets), eval_every
        self.val_runs, self.val_seed, self.val_batch, self.compile = val_runs, val_seed, val_batch, compile
        # sdpa="math": attention through PyTorch's reference path instead of the fused (flash) CPU
        # kernel that F.scaled_dot_product_attention picks by itself
        self.kernel = sdpa_kernel(SDPBackend.MATH) if sdpa == "math" else contextlib.nullcontext()
        self.points: list[dict] = []
        self.paused_cpu = self.paused_wall = 0.0

    def setup(self, trainer, pl_module, stage: str) -> None:
        self.kernel.__enter__()
        if self.compile:
            pl_module.model.compile()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.kernel.__exit__(None, None, None)

    def on_train_start(self, trainer, pl_module) -> None:
        from omgpt.module import validation_envs

        self.task = pl_module.task.validation_task()
        self.envs = validation_envs(self.task, self.val_runs, self.val_seed)
        # a resumed arm (load_state_dict) reads on from its checkpoint's clock, with the evaluations before it
        resumed = getattr(self, "resumed", None) or {"cpu_s": 0.0, "wall_s": 0.0, "points": []}
        self.start_cpu = cpu_seconds() - resumed["cpu_s"]
        self.start_wall = time.perf_counter() - resumed["wall_s"]
        self.paused_cpu = self.paused_wall = 0.0  # (Lightning's sanity-check validation ran before the start)
        self.points = list(resumed["points"])
        self.next_eval = (resumed["cpu_s"] // self.eval_every + 1) * self.eval_every
        self.pending = [b for b in self.budgets if b > resumed["cpu_s"]]  # each budget crossed was evaluated then

    # An arm stopped mid-way (a session's end) resumes from its last checkpoint (--resume): the clock and
    # the evaluations so far travel in the checkpoint, so the training redone after it is not counted twice.
    def state_dict(self) -> dict:
        cpu, wall = self.clock() if hasattr(self, "start_cpu") else (0.0, 0.0)
        return {"cpu_s": cpu, "wall_s": wall, "points": self.points}

    def load_state_dict(self, state_dict: dict) -> None:
        self.resumed = state_dict

    def clock(self) -> tuple[float, float]:
        """(CPU, wall) seconds of training so far."""
        return (
            cpu_seconds() - self.start_cpu - self.paused_cpu,
            time.perf_counter() - self.start_wall - self.paused_wall,
        )

    # The recipe's own validation (the checkpoint rule) is not training.
    def on_validation_start(self, trainer, pl_module) -> None:
        self._paused_at = cpu_seconds(), time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if hasattr(self, "_paused_at"):
            self.paused_cpu += cpu_seconds() - self._paused_at[0]
            self.paused_wall += time.perf_counter() - self._paused_at[1]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        cpu, _ = self.clock()
        crossed = [b for b in self.pending if cpu >= b]
        if crossed or cpu >= self.next_eval:
            self.pending = [b for b in self.pending if cpu < b]
            self.evaluate(trainer, pl_module)
            self.next_eval = (cpu // self.eval_every + 1) * self.eval_every
        if not self.pending:
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module) -> None:
        if not self.points or self.points[-1]["step"] != trainer.global_step:
            self.evaluate(trainer, pl_module)
        ckpt = (
            trainer.checkpoint_callback.best_model_path
            or trainer.checkpoint_callback.last_model_path
            or str(trainer.ckpt_path or "")  # a resumed fit that saved nothing: the checkpoint it resumed from
        )  # what the demo plays
        self.write(trainer, ckpt=ckpt, finished=True)

    def on_fit_end(self, trainer, pl_module) -> None:
        # An arm killed after its final checkpoint but before the trace's final write resumes from that
        # checkpoint with nothing left to train: Lightning then skips the training loop and its hooks,
        # so the trace is finished here (its points and clock come from the checkpoint).
        if not hasattr(self, "start_cpu"):
            self.on_train_start(trainer, pl_module)
            self.on_train_end(trainer, pl_module)

    def write(self, trainer, **more) -> None:
        """The trace so far (rewritten at every evaluation: a stopped run keeps what it measured), whole
        or not at all: a kill mid-write leaves the previous trace."""
        trace = {"points": self.points, "steps": trainer.global_step, "finished": False, **more}
        write_text(self.out, json.dumps(trace, indent=1))

    def evaluate(self, trainer, pl_module) -> None:
        from omgpt.policies import make_policy

        cpu, wall = self.clock()
        paused = cpu_seconds(), time.perf_counter()
        model, was_training = pl_module.model, pl_module.model.training
        model.eval()
        with torch.no_grad():
            if self.metric == "obs-mse":
                head, ridge = validation_obs_errors(
                    self.task, self.envs, model, pl_module.hparams.horizon, self.val_seed, self.val_batch
                )
                measured = {"obs_mse": head, "ridge_mse": ridge, "ratio": head / ridge}
            else:
                regret = validation_regret(
                    self.task,
                    self.envs,
                    lambda: make_policy("omgpt", self.task, model=model, window=pl_module.hparams.window),
                    pl_module.hparams.horizon,
                    self.val_seed,
                    self.val_batch,
                )
                measured = {"regret": regret, "ratio": regret / self.alg_star}
        model.train(was_training)
        eval_cpu = cpu_seconds() - paused[0]
        self.points.append(
            {"cpu_s": cpu, "wall_s": wall, "step": trainer.global_step, **measured, "eval_cpu_s": eval_cpu}
        )
        shown = (
            f"head MSE {measured['obs_mse']:.4g}  {measured['ratio']:.3f}x ridge's"
            if self.metric == "obs-mse"
            else f"val regret {measured['regret']:6.2f}  {measured['ratio']:.3f}x alg-star"
        )
        print(
            f"  step {trainer.global_step:5d}  {cpu:6.1f} CPU-s  {wall:6.1f} s  {shown}  (evaluation {eval_cpu:.1f} CPU-s)",
            flush=True,
        )
        self.write(trainer)
        self.paused_cpu += cpu_seconds() - paused[0]
        self.paused_wall += time.perf_counter() - paused[1]


# --------------------------------------------------------------------------------------------------
def arm_spec(text: str) -> tuple[str, str, list[str]]:
    """``NAME=CONFIG [OVERRIDE ...]`` -> (name, config, overrides)."""
    name, _, rest = text.partition("=")
    words = shlex.split(rest)
    if not name or not words:
        raise OMGPTError(f"--arm {text!r}: expected NAME=CONFIG [OVERRIDE ...]")
    if not (ROOT / words[0]).is_file() and not Path(words[0]).is_file():
        raise OMGPTError(f"--arm {name}: no config file {words[0]!r}")
    return name, words[0], words[1:]


def parent_arm(overrides: list[str]) -> str | None:
    """The arm a ``--from=ARM`` arm starts from (fine-tuning: its weights, and its CPU time on the clock)."""
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("--from=")), None)


SDPA = ("math",)  # --sdpa=math: PyTorch's reference attention; without --sdpa, the fused kernel


def arm_knobs(name: str, overrides: list[str]) -> dict:
    """The benchmark's own knobs among an arm's overrides, checked before any work: ``compile``,
    ``sdpa`` (``None``: the fused kernel), ``threads`` (``None``: ``--threads``) and ``from`` (the parent
    arm). A bad value is one line naming the arm, not a silent default (``--sdpa=maths`` ran the fused
    kernel) nor a ValueError at that arm's turn, after alg-star and the arms before it have run."""
    knobs = {"compile": "--compile" in overrides, "sdpa": None, "threads": None, "from": parent_arm(overrides)}
    for o in overrides:
        if o.startswith("--sdpa="):
            knobs["sdpa"] = o.removeprefix("--sdpa=")
            if knobs["sdpa"] not in SDPA:
                raise OMGPTError(
                    f"--arm {name}: {o}: the one choice is --sdpa=math (PyTorch's reference attention); "
                    "leave it out for the fused kernel"
                )
        elif o.startswith("--threads="):
            try:
                knobs["threads"] = Integer(1, 256)(o.removeprefix("--threads="))
            except argparse.ArgumentTypeError as e:
                raise OMGPTError(f"--arm {name}: --threads: {e}") from None
    return knobs


def fit_arguments(overrides: list[str]) -> list[str]:
    """An arm's overrides less the benchmark's own knobs: what its ``omgpt fit`` is given."""
    return [o for o in overrides if o != "--compile" and not o.startswith(("--sdpa=", "--from=", "--threads="))]


SETTING = {"--model.task": "task", "--model.task_options": "task_options", "--model.horizon": "horizon"}


def arm_setting(config: str, overrides: list[str]) -> dict:
    """The setting an arm trains (``task``, ``task_options``, ``horizon``): its config's ``model`` block,
    then any of those three among its overrides (``--model.task pricing`` or ``--model.task=pricing``), so
    a generic recipe such as ``configs/scale/cpu.yaml`` can be pointed at any task."""
    import yaml

    path = Path(config) if Path(config).is_file() else ROOT / config
    try:
        model = (yaml.safe_load(path.read_text()) or {}).get("model") or {}
    except (OSError, yaml.YAMLError, AttributeError) as err:
        raise OMGPTError(f"--arm: cannot read {config}: {err}") from None
    found = {k: model.get(k) for k in SETTING.values()}
    words = iter(overrides)
    for word in words:
        flag, eq, value = word.partition("=")
        if flag in SETTING:
            value = value if eq else next(words, None)
            try:
                found[SETTING[flag]] = yaml.safe_load(value) if value is not None else None
            except yaml.YAMLError:
                raise OMGPTError(f"--arm: {flag} {value!r} does not parse") from None
    if not found["task"] or not isinstance(found["horizon"], int):
        raise OMGPTError(
            f"--arm {config} {' '.join(overrides)}: no model.task and model.horizon (add --model.task and --model.horizon)"
        )
    return found


def alg_star_regret(
    model: dict, val_runs: int, val_seed: int, val_batch: int, cache_dir: Path, reference: str = "alg-star"
) -> float:
    """The reference's (``alg-star``'s, or a benchmark's: :func:`reference_policy`) mean final regret on
    the validation environments, computed once per set of episodes (the cache key hashes the reference,
    the environments and the code that seeds their contexts and noise). A reference whose mean regret is
    not positive cannot be a ratio's denominator: one line."""
    import omgpt.seeding
    from omgpt.module import validation_envs
    from omgpt.policies import make_policy
    from omgpt.tasks import make_episode_task

    task = make_episode_task(model["task"], model.get("task_options"), model["horizon"]).validation_task()
    envs = validation_envs(task, val_runs, val_seed)
    key = f"{task.name} {model.get('task_options')} {model['horizon']} {val_batch} {val_seed}"
    h = hashlib.sha256((key if reference == "alg-star" else f"{key} {reference}").encode())  # alg-star's old caches
    h.update(Path(omgpt.seeding.__file__).read_bytes())
    for k in sorted(envs):
        h.update(k.encode() + envs[k].contiguous().numpy().tobytes())
    path = cache_dir / f"alg_star_{h.hexdigest()[:16]}.json"
    if path.is_file():
        try:
            return records.read_json(path, {"regret": NUMBER}, "alg-star cache")["regret"]
        except RecordError as e:  # truncated, binary, another shape: a cache, so computed again and replaced
            print(f"{e}: computed again", flush=True)
    print(
        f"alg-star on the {val_runs} validation environments (seed {val_seed}; once, then cached in {path}) ...",
        flush=True,
    )
    start = time.process_time()
    policy, options = reference_policy(reference)
    regret = validation_regret(
        task, envs, lambda: make_policy(policy, task, **options), model["horizon"], val_seed, val_batch
    )
    if regret <= 0:
        raise OMGPTError(
            f"--reference {reference}: its mean validation regret is {regret:.3g}, not positive: no ratio can be read against it"
        )
    write_text(
        path,
        json.dumps(
            {
                "regret": regret,
                "cpu_s": time.process_time() - start,
                "task": task.name,
                "horizon": model["horizon"],
                "val_runs": val_runs,
                "val_seed": val_seed,
            }
        ),
    )
    return regret


POINT = {"cpu_s": NUMBER, "step": int, "ratio": NUMBER}  # an evaluation (and what its metric measured)
CLOCK = {"cpu_s": NUMBER, "wall_s": NUMBER, "points": ListOf(POINT)}  # QualityClock.state_dict
TRACE = {"points": ListOf(POINT), "steps": int, "finished": bool}  # QualityClock.write
FINISHED = {**TRACE, "points": ListOf(POINT, nonempty=True), "ckpt": str}


def finished_trace(path: Path) -> dict | None:
    """The trace of an arm that finished, else ``None``: none yet, stopped mid-way, or a file that is no
    trace (truncated, binary, another shape, finished without an evaluation), said in a line naming it.
    Such an arm is not reused: it goes on from its last checkpoint, which holds its clock and
    evaluations, and its fit writes the trace anew (or it starts again where it has none)."""
    if not path.is_file():
        return None
    try:
        trace = records.read_json(path, TRACE, "trace")
        return records.check(trace, FINISHED, path) if trace["finished"] else None
    except RecordError as e:
        print(f"{e}: not reused; the arm goes on from its last checkpoint", flush=True)
        return None


def resumable_checkpoint(runs: Path) -> Path | None:
    """The newest ``last.ckpt`` of a stopped arm's runs (``runs/version_*``) that holds its clock, else ``None``
    (the arm then starts again: without the clock the CPU time already spent would be lost). Read
    weights-only (:func:`omgpt.checkpoints.read_checkpoint`: no file under ``--out`` runs code); a damaged
    one, or a clock that is not one, is one line naming the file (delete it and the arm starts again)."""
    for ckpt in sorted(runs.glob("version_*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True):
        state = read_checkpoint(ckpt).get("callbacks")
        clock = state.get(QualityClock.__qualname__) if isinstance(state, dict) else None
        if clock is not None:
            records.check(clock, CLOCK, ckpt, f"callbacks.{QualityClock.__qualname__}")
            return ckpt
        print(f"{ckpt} has no clock (written before arms could resume): the arm starts again", flush=True)
        return None
    return None


def fit_command(
    config: str, overrides: list[str], trace: Path, clock: dict, seed: int, resume: Path | None = None
) -> list[str]:
    """``omgpt fit`` of one arm, the clock added to its callbacks by a config layer written beside the trace;
    ``resume``: the arm's last checkpoint, to go on from (its clock included)."""
    import yaml

    layer = trace.with_suffix(".yaml")
    write_text(
        layer,
        yaml.safe_dump(
            {"trainer": {"callbacks+": [{"class_path": "time_to_quality.QualityClock", "init_args": clock}]}}
        ),
    )
    return [
        sys.executable,
        "-m",
        "omgpt",
        "fit",
        "--config",
        config,
        *overrides,
        "--config",
        str(layer),
        "--seed_everything",
        str(seed),
        "--trainer.logger.init_args.save_dir",
        str(trace.parent),
        "--trainer.logger.init_args.name",
        trace.stem,
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        *(["--ckpt_path", str(resume)] if resume else []),
    ]


def run_fit(cmd: list[str], threads: int) -> None:
    """Run an arm's fit with ``threads`` intra-op threads, this folder importable (the clock's class)."""
    path = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": path}
    code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    if code:  # its own error is printed above
        raise OMGPTError(f"the arm's omgpt fit exited with {code}: {shlex.join(cmd[1:])}")


def first_at_most(points: list[dict], target: float) -> dict | None:
    return next((p for p in points if p["ratio"] <= target), None)


def at_budget(points: list[dict], budget_s: float) -> dict | None:
    """The first evaluation at or after the budget (the one it triggered), else the run's last one when
    the recipe ended before the budget."""
    return next((p for p in points if p["cpu_s"] >= budget_s), points[-1] if points else None)


def holdout_ratios(results: list[dict], runs: int, seed: int, reference: str = "alg-star") -> None:
    """Every arm's checkpoint and ``alg-star`` on the same ``runs`` held-out environments of ``seed`` (the
    evaluation loop of ``omgpt evaluate``, common random numbers): each arm's ratio to ``alg-star`` and
    to the first arm, with paired bootstrap 90% intervals. After training arms the comparison chooses a
    recipe, so ``seed`` is a validation seed, other than the fit's own (docs/protocol.md): the demo's test
    seed 0 was spent this way once, and the demo moved to ``DEMO_SEED``. With ``--checkpoint`` it reports
    a choice already made, and a test seed is what it should be."""
    from omgpt.analysis.report import interval, paired_ratio
    from omgpt.evaluation import evaluate_policies
    from omgpt.model import load_model
    from omgpt.seeding import VALIDATION_SEEDS
    from omgpt.tasks import make_episode_task

    kind = "validation" if seed in VALIDATION_SEEDS else "test"
    finals = {}
    played = {r["arm"]: setting(r["ckpt"]) for r in results}
    if len(set(map(repr, played.values()))) > 1:  # alg-star is played once, on one setting's environments
        raise OMGPTError(f"the arms' checkpoints play different settings: {played}")
    name, options, horizon = played[results[0]["arm"]]
    task = make_episode_task(name, options, horizon)  # every arm's, and alg-star's
    for r in results:
        model = load_model(r["ckpt"]).model
        finals[r["arm"]] = evaluate_policies(task, {"omgpt": {"model": model}}, runs, horizon, seed, progress=False)[
            "omgpt"
        ]
        print(
            f"  {r['arm']}: omgpt evaluate --ckpt {r['ckpt']} --policies omgpt,alg-star --runs {runs} --seed {seed}",
            flush=True,
        )
    policy, options = reference_policy(reference)
    star = evaluate_policies(task, {policy: options}, runs, horizon, seed, progress=False)[policy]
    final = lambda h: h.cumulative_regret()[:, -1].double().numpy()
    first = results[0]["arm"]
    print(f"\n{runs} held-out {kind} environments (seed {seed}), final regret: alg-star {final(star).mean():.2f}")
    print(f"{'arm':16} {'regret':>7} {'/ alg-star [90% CI]':>24} {'/ ' + first + ' [90% CI]':>26}")
    for r in results:
        to_star, to_first = (
            paired_ratio(final(finals[r["arm"]]), final(star)),
            paired_ratio(final(finals[r["arm"]]), final(finals[first])),
        )
        r["holdout"] = {
            "runs": runs,
            "seed": seed,
            "regret": float(final(finals[r["arm"]]).mean()),
            "alg_star": float(final(star).mean()),
            "ratio_to_alg_star": to_star,
            "ratio_to_first": to_first,
        }
        print(
            f"{r['arm']:16} {r['holdout']['regret']:7.2f} {to_star['mean']:8.3f} {interval(to_star['ci90']):>15} "
            f"{to_first['mean']:8.3f} {interval(to_first['ci90']):>17}"
        )


def report_checkpoints(args: argparse.Namespace) -> None:
    """``--checkpoint``: trained checkpoints (a choice already made) on the held-out environments."""
    results = [{"arm": name, "ckpt": str(ckpt)} for name, ckpt in args.checkpoint]
    torch.set_num_threads(1)
    holdout_ratios(results, 100 if args.holdout_runs is None else args.holdout_runs, args.holdout_seed)
    if args.json:
        write_json({"arms": results}, args.json, indent=1)


def setting(ckpt: str) -> tuple:
    """What a checkpoint plays: its task, task options and horizon (arms are compared on one setting)."""
    from omgpt.model import load_model

    hp = load_model(ckpt).hparams
    return hp["task"], hp.get("task_options") or {}, hp["horizon"]


def check_fits(fits: dict[str, list[str]]) -> dict[str, dict]:
    """Every arm's fit built -- module, data, trainer -- and nothing fitted, in one process of the
    commands' layer (``omgpt.commands.lightning_cli``): a setting an arm's module refuses is one line
    before the first arm trains, not a failure at that arm's turn hours in. Returns each fit's module
    hyper-parameters."""
    done = subprocess.run(
        [sys.executable, "-m", "omgpt.commands.lightning_cli"],
        input=json.dumps(fits),
        capture_output=True,
        text=True,
        cwd=ROOT,  # as the arms' fits run (run_fit)
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if done.returncode:
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        raise OMGPTError(lines[-1].removeprefix("omgpt: error: "))
    return json.loads(done.stdout.strip().splitlines()[-1])


def parser() -> ScriptParser:
    p = script_parser(__file__, __doc__)
    p.add_argument(
        "--arm",
        action="append",
        type=Text(),
        help="NAME=CONFIG [OVERRIDE ...] (repeatable; default: the demo's earlier 3,000-step recipe and configs/demo.yaml)",
    )
    p.add_argument(
        "--budgets",
        type=Numbers(Real(0, 10_000, low_open=True)),
        default="2,5,10",
        help="CPU-minute budgets, comma-separated",
    )
    p.add_argument(
        "--metric",
        choices=["regret", "obs-mse"],
        default="regret",
        help="the quality: final regret over alg-star's, or the observation head's MSE after T - 1 samples over "
        "ridge's on the same rollouts (demand prediction; the arms need --model.network.obs_head true)",
    )
    p.add_argument(
        "--reference",
        type=Text(),
        default="alg-star",
        help="the policy whose validation regret the ratios divide by (a task without alg-star: its best benchmark, "
        "e.g. ada; the record's alg_star and ratio_to_alg_star fields then hold this policy's)",
    )
    p.add_argument("--quick", action="store_true", help="budgets 1,2 and --eval-every 5 (a smoke run)")
    p.add_argument(
        "--target",
        type=Numbers(Real(0, 1000, low_open=True)),
        default="1.25",
        help="the validation ratios to alg-star to reach, comma-separated (e.g. 2,1.5,1.25)",
    )
    p.add_argument(
        "--eval-every",
        type=Real(0, 86_400, low_open=True),
        default=10.0,
        help="CPU-seconds of training between evaluations",
    )
    p.add_argument(
        "--threads", type=Integer(1, 256), default=1, help="intra-op threads of every arm (an arm's --threads=N wins)"
    )
    p.add_argument("--val-runs", type=Integer(1, 100_000), default=128)
    p.add_argument("--val-batch", type=Integer(1, 100_000), default=128)
    p.add_argument("--val-seed", type=Seed("validation"), default=10_000)
    p.add_argument(
        "--seed", type=Seed(), default=0, help="seed_everything of every arm (training histories, initial weights)"
    )
    p.add_argument("--out", type=OutputFolder(), default=ROOT / "runs" / "time_to_quality")
    p.add_argument("--json", type=OutputFile(), help="also write the results here")
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse every arm whose trace in --out finished under the same command (a study spread over sessions)",
    )
    p.add_argument("--plot", type=OutputFile(), help="draw every arm's curve (ratio against CPU-minutes) here (PNG)")
    p.add_argument(
        "--holdout-runs",
        type=Integer(1, 100_000),
        default=None,
        help="then play every arm's checkpoint and alg-star on this many held-out environments (--checkpoint: 100)",
    )
    p.add_argument(
        "--holdout-seed",
        type=Seed(),
        default=10_003,
        help="their seed: a validation seed other than --val-seed (the comparison chooses)",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        type=Named(Checkpoint()),
        help="NAME=CKPT (repeatable): no training; play these checkpoints on the held-out environments, "
        "whose --holdout-seed may then be a test seed",
    )

    @p.check
    def arguments(args: argparse.Namespace) -> None:  # every one before any work
        from omgpt.seeding import VALIDATION_SEEDS, check_test_seed, check_validation_seed

        if args.checkpoint:
            if args.holdout_seed not in VALIDATION_SEEDS:
                check_test_seed(args.holdout_seed, "--holdout-seed")  # a burned test seed is refused
            if len({name for name, _ in args.checkpoint}) != len(args.checkpoint):
                raise OMGPTError("--checkpoint: the names must differ")
            settings_ = {name: setting(ckpt) for name, ckpt in args.checkpoint}
            if len(set(map(repr, settings_.values()))) > 1:  # alg-star and the ratios need one setting
                shown = "; ".join(f"{n}: {s[0]} {s[1] or ''} horizon {s[2]}" for n, s in settings_.items())
                raise OMGPTError(
                    f"--checkpoint: the checkpoints play different settings ({shown}); compare one at a time"
                )
            return
        if args.metric == "obs-mse" and args.holdout_runs:
            raise OMGPTError(
                "--holdout-runs plays regret; with --metric obs-mse report a checkpoint by omgpt evaluate --demand-prediction"
            )
        check_validation_seed(args.holdout_seed, "--holdout-seed")
        if args.holdout_seed == args.val_seed:
            raise OMGPTError("--holdout-seed must differ from --val-seed (the curves' own environments)")
        args.arms = [arm_spec(a) for a in (args.arm or DEFAULT_ARMS)]
        if len({a[0] for a in args.arms}) != len(args.arms):
            raise OMGPTError("--arm: the arm names must differ")
        args.knobs = {name: arm_knobs(name, overrides) for name, _, overrides in args.arms}
        fits = {}
        for i, (name, config, overrides) in enumerate(args.arms):
            parent = args.knobs[name]["from"]
            if parent is not None and parent not in [a[0] for a in args.arms[:i]]:
                raise OMGPTError(f"--arm {name}: --from={parent} must name an earlier arm")
            from_parent = ["--model.finetune.init_from", f"{parent}-kept.ckpt"] if parent else []  # not read
            fits[f"--arm {name}"] = ["--config", config, *fit_arguments(overrides), *from_parent]
        built = check_fits(fits)
        for name, hparams in built.items():
            if args.metric == "obs-mse" and not (hparams.get("network") or {}).get("obs_head"):
                raise OMGPTError(
                    f"{name}: --metric obs-mse measures the observation head, and the arm trains none "
                    "(add --model.network.obs_head true)"
                )

    return p


@entry_point
def main(argv: list[str] | None = None) -> None:
    from omgpt.timing import machine

    args = parser().parse_args(argv)
    if args.checkpoint:
        return report_checkpoints(args)
    if args.quick:
        args.budgets, args.eval_every = "1,2", 5.0
    budgets = [float(b) * 60 for b in args.budgets.split(",")]
    targets = sorted((float(t) for t in args.target.split(",")), reverse=True)
    arms = args.arms
    setting_ = arm_setting(arms[0][1], arms[0][2])
    for name, config, overrides in arms[1:]:  # alg-star and the ratios are one setting's
        if arm_setting(config, overrides) != setting_:
            raise OMGPTError(f"arm {name} trains {arm_setting(config, overrides)}, not {arms[0][0]}'s {setting_}")
    if args.metric == "regret":  # before alg-star or any arm runs
        from omgpt.policies import policies_for
        from omgpt.tasks import make_episode_task

        task = make_episode_task(setting_["task"], setting_.get("task_options"), setting_["horizon"])
        if args.reference not in policies_for(task):
            raise OMGPTError(
                f"--reference {args.reference}: not a policy of {setting_['task']} ({', '.join(sorted(policies_for(task)))})"
            )
    torch.set_num_threads(1)
    if args.metric == "obs-mse":  # the reference, ridge, is fitted on each evaluation's own rollouts
        alg_star, reference = None, "ridge's head MSE"
    else:
        alg_star = alg_star_regret(setting_, args.val_runs, args.val_seed, args.val_batch, args.out, args.reference)
        reference = f"{args.reference}'s validation regret {alg_star:.3f}"
    print(f"{machine()}; {setting_}; {reference}; targets {args.target}x; budgets {args.budgets} CPU-minutes")

    results = []
    for name, config, overrides in arms:
        knobs = args.knobs[name]  # the benchmark's own, checked by the parse
        threads = knobs["threads"] or args.threads
        fit_overrides = fit_arguments(overrides)
        parent = next((r for r in results if r["arm"] == knobs["from"]), None)
        if parent is not None:  # fine-tuning: starts from the parent's kept weights, after its training time
            fit_overrides += ["--model.finetune.init_from", parent["ckpt"]]
        clock = {
            "alg_star": alg_star,
            "budgets": budgets,
            "eval_every": args.eval_every,
            "val_runs": args.val_runs,
            "val_seed": args.val_seed,
            "val_batch": args.val_batch,
            "compile": knobs["compile"],
            "sdpa": knobs["sdpa"],
            "metric": args.metric,
        }
        # an arm's trace is named by everything that decides it, so a finished one is reused (--resume)
        key = json.dumps([name, config, fit_overrides, clock, args.seed, threads], sort_keys=True, default=str)
        trace = args.out / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"
        args.out.mkdir(parents=True, exist_ok=True)
        run = finished_trace(trace) if args.resume else None
        if run is not None:
            print(f"\narm {name}: finished before, reused ({trace})", flush=True)
        else:
            resume = resumable_checkpoint(args.out / trace.stem) if args.resume else None
            cmd = fit_command(config, fit_overrides, trace, {"out": str(trace), **clock}, args.seed, resume)
            print(f"\narm {name}: {' '.join(cmd[1:])} ({threads} thread(s))", flush=True)
            run_fit(cmd, threads)
            run = records.read_json(trace, FINISHED, "trace")  # the fit finished it
        last = run["points"][-1]
        offset = parent["points"][-1]["cpu_s"] if parent else 0.0  # the whole parent run's training CPU
        for point in run["points"]:
            point["cpu_s"] += offset
        results.append(
            {
                "arm": name,
                "config": config,
                "overrides": overrides,
                "threads": threads,
                "steps": run["steps"],
                "from": parent and parent["arm"],
                "cpu_ms_per_step": 1000 * (last["cpu_s"] - offset) / max(1, last["step"]),
                "to_target": {f"{t:g}": first_at_most(run["points"], t) for t in targets},
                "best": min(run["points"], key=lambda p: p["ratio"]),
                "at_budget": {f"{b / 60:g}": at_budget(run["points"], b) for b in budgets},
                "ckpt": run["ckpt"],
                "points": run["points"],
            }
        )
    print_table(results, targets, budgets, "ridge" if args.metric == "obs-mse" else args.reference)
    if args.holdout_runs:
        holdout_ratios(results, args.holdout_runs, args.holdout_seed, args.reference)
    record = {
        "machine": machine(),
        "setting": setting_,
        "metric": args.metric,
        "reference": "ridge" if args.metric == "obs-mse" else args.reference,  # what "alg_star" is the regret of
        "alg_star": alg_star,
        "targets": targets,
        "budgets_min": args.budgets,
        "eval_every": args.eval_every,
        "val_runs": args.val_runs,
        "val_seed": args.val_seed,
        "seed": args.seed,
        "command": "python benchmarks/time_to_quality.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "arms": results,
    }
    if args.json:
        write_json(record, args.json, indent=1)
    if args.plot:
        plot_curves(record, args.plot)


def print_table(results: list[dict], targets: list[float], budgets: list[float], reference: str = "alg-star") -> None:
    """Per arm: CPU-minutes to each target (validation environments), the best ratio seen, and the
    ratio at each budget."""
    print(f"\ntraining CPU-minutes to each ratio to {reference} on the validation environments (CPU time)")
    cols = "".join(f"{'to ' + format(t, 'g') + 'x':>9}" for t in targets)
    head = "".join(f"{'@' + format(b / 60, 'g') + ' min':>10}" for b in budgets)
    print(f"{'arm':16} {'steps':>6} {'CPU-ms/step':>11}{cols} {'best':>12} {head}")
    for r in results:
        reached = "".join(
            f"{hit['cpu_s'] / 60:9.1f}" if (hit := r["to_target"][f"{t:g}"]) else f"{'-':>9}" for t in targets
        )
        best = f"{r['best']['ratio']:.2f}@{r['best']['cpu_s'] / 60:.0f}m"
        cells = "".join(
            f"{r['at_budget'][k]['ratio']:9.2f}{'*' if r['at_budget'][k]['cpu_s'] < float(k) * 60 else ' '}"
            for k in r["at_budget"]
        )
        print(f"{r['arm']:16} {r['steps']:6d} {r['cpu_ms_per_step']:11.1f}{reached} {best:>12} {cells}")
    print("-: not reached within the budget; * the recipe ended before this budget: its last evaluation")


def plot_curves(record: dict, path: Path) -> None:
    """One figure: every arm's validation ratio to alg-star against training CPU-minutes (log scale),
    the targets as dotted lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in record["arms"]:
        ax.plot([p["cpu_s"] / 60 for p in r["points"]], [p["ratio"] for p in r["points"]], label=r["arm"])
    for t in record["targets"]:
        ax.axhline(t, ls=":", lw=0.8, color="grey")
    s = record["setting"]
    ax.set(
        yscale="log",
        xlabel="training CPU-minutes (one thread)",
        ylabel="head MSE / ridge's" if record.get("metric") == "obs-mse" else "validation regret / alg-star's",
        title=f"{s['task']} {s['task_options'] or ''}, T = {s['horizon']}",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"figure: {path}")


if __name__ == "__main__":
    sys.exit(main())
