"""The speed benchmarks run and report their ratios (``omgpt bench``, ``benchmarks/*.py``).

Correctness only -- cached and uncached rollouts act identically, every ratio is printed and finite --
never a timing assertion: timings depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import json
import math
import runpy
import sys
from pathlib import Path

import pytest

from omgpt.commands.cli import cli_main

ROOT = Path(__file__).resolve().parents[1]


def test_omgpt_bench_prints_the_four_ratios(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert cli_main(["bench", "--smoke", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for line in ("KV cache", "data generation", "streaming data", "Lightning"):
        assert any(l.strip().startswith(line) for l in printed.splitlines()), (line, printed)
    results = json.loads(out.read_text())
    ratios = results["ratios"]
    assert set(ratios) == {"kv_cache_speedup", "datagen_speedup", "streaming_step_ratio", "lightning_step_ratio"}
    assert all(math.isfinite(r) and r > 0 for r in ratios.values()), ratios
    for r in results["kv_cache"]:
        assert r["max_abs_diff"] <= 1e-4, r  # the cache changes the cost, not the decisions
    assert [r["workers"] for r in results["streaming"]] == [0]
    assert results["lightning"]["steps"] == 6


def test_bench_rejects_a_bad_option(capsys):
    assert cli_main(["bench", "--sizes", "huge"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("omgpt: error:") and "\n" not in err


@pytest.mark.parametrize(
    "script, args, expect",
    [
        ("kv_cache.py", ["--sizes", "tiny,demo", "--batch", "4", "--horizon", "8"], "speed-up"),
        ("streaming.py", ["--steps", "4", "--workers", "0", "--repeats", "1"], "ratio"),
        ("lightning_overhead.py", ["--steps", "4", "--repeats", "1"], "ratio"),
        (
            "demo_wall.py",
            ["--max-steps", "2", "--runs", "4", "--busy", "spin", "--session", "own"],
            "beside one busy process (spin, own session)",
        ),
        ("step_beside.py", ["--steps", "2", "--neighbours", "none,spin,matmul2-own"], "matmul2-own"),
        (
            "step_cost.py",
            [
                "--batches",
                "8",
                "--steps",
                "1",
                "--repeats",
                "1",
                "--variants",
                "fp32,heads=1,fused,no-attention,no-gelu",
            ],
            "no-gelu",
        ),
    ],
)
@pytest.mark.slow
def test_benchmark_scripts_run_standalone(script, args, expect, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [script, *args])
    with pytest.raises(SystemExit) as ended:  # a script ends with sys.exit(main()): its exit code
        runpy.run_path(str(ROOT / "benchmarks" / script), run_name="__main__")
    printed = capsys.readouterr().out
    assert ended.value.code == 0, capsys.readouterr().err
    assert expect in printed, printed
    if script == "kv_cache.py":  # identical actions, cached or not, at both sizes
        diffs = [float(l.rsplit(" ", 1)[-1]) for l in printed.splitlines() if "max|a_cached - a_full|" in l]
        assert len(diffs) == 2 and max(diffs) <= 1e-4, printed


@pytest.mark.slow
def test_bench_runs_from_a_regular_install(tmp_path):
    """``pip install .`` (not editable) ships the benchmark scripts and the configs inside the package
    (``omgpt/_benchmarks``, ``omgpt/_configs``): ``omgpt bench`` runs there, away from the checkout."""
    import os
    import subprocess

    site = tmp_path / "site"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    assert (site / "omgpt/_benchmarks/kv_cache.py").is_file() and (site / "omgpt/_configs/base.yaml").is_file()
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", "import omgpt.resources as r; print(r.BENCHMARKS)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert probe.stdout.strip() == str(site / "omgpt/_benchmarks"), probe.stderr
    done = subprocess.run(
        [sys.executable, "-m", "omgpt", "bench", "--smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the four ratios" in done.stdout


def test_time_to_quality_reads_an_arms_setting_from_its_config_then_its_overrides(tmp_path):
    from benchmarks.time_to_quality import arm_setting
    from omgpt.errors import OMGPTError

    # the demo's config names its setting; flags in either form win over it, option by option
    demo = arm_setting("configs/demo.yaml", [])
    assert demo["task"] == "newsvendor" and demo["horizon"] == 50
    pool = arm_setting(
        "configs/scale/cpu.yaml",
        ["--model.task", "pricing", "--model.task_options={pool_size: 100}", "--model.horizon", "100"],
    )
    assert pool == {"task": "pricing", "task_options": {"pool_size": 100}, "horizon": 100}
    assert arm_setting("configs/demo.yaml", ["--model.horizon=20", "--trainer.max_epochs", "3"])["horizon"] == 20
    with pytest.raises(OMGPTError, match="no model.task"):  # a generic recipe pointed at nothing
        arm_setting("configs/scale/cpu.yaml", ["--trainer.max_epochs", "3"])


def test_time_to_quality_refuses_an_arm_its_fit_would_refuse_before_any_arm_trains(tmp_path, capsys):
    """Every arm's module, data and trainer are built before the first arm trains: a refusal that would
    otherwise end the study at that arm's turn, hours in, is one line now and nothing is written."""
    from benchmarks.time_to_quality import main

    setting = '--model.task mab --model.task_options "{pool_size: 4}" --model.horizon 12'
    arm = f"configs/scale/tiny.yaml {setting} --config configs/finetune/regret.yaml --from=a"
    argv = ["--arm", f"a=configs/scale/tiny.yaml {setting}", "--arm", f"ft={arm}", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--arm ft: task 'mab' has discrete actions" in err and "estimator score" in err
    assert not (tmp_path / "o").exists()
    assert main(["--arm", "a=configs/demo.yaml --print_config", "--out", str(tmp_path / "o")]) == 2
    assert "prints and exits: it fits nothing" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_time_to_quality_measures_against_a_named_reference_and_refuses_one_of_another_task(tmp_path, capsys):
    """--reference: a task without alg-star measures its arms against a benchmark (revenue: ada); a name
    that is no policy of the arms' task is one line before any work, nothing written."""
    from benchmarks import lever_study
    from benchmarks.time_to_quality import main

    argv = lever_study.command("revenue", ["cpu-recipe"])
    assert argv[argv.index("--reference") + 1] == "ada" and "--model.horizon 50" in argv[1]
    setting = "--model.task revenue --model.horizon 8"
    out = tmp_path / "o"
    assert main(["--arm", f"a=configs/scale/tiny.yaml {setting}", "--reference", "ce", "--out", str(out)]) == 2
    assert "--reference ce: not a policy of revenue" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    "setting", ["mab-100", "pricing-100", "newsvendor-100", "pricing-16", "demand-single", "revenue", "queueing"]
)
def test_every_lever_study_arm_builds_its_fit(setting):
    """The study's arms are checked as time_to_quality checks them before training (what its mab-100
    fine-tuning arm, pathwise on discrete arms, failed only after the other arms' 90 CPU-minutes)."""
    from benchmarks import lever_study
    from benchmarks.time_to_quality import arm_spec, fit_arguments, parent_arm
    from omgpt.commands.lightning_cli import check_fits

    fits = {}
    for name, text in lever_study.arms(setting).items():
        _, config, overrides = arm_spec(f"{name}={text}")
        parent = ["--model.finetune.init_from", "kept.ckpt"] if parent_arm(overrides) else []
        fits[name] = ["--config", config, *fit_arguments(overrides), *parent]
    check_fits(fits)


def test_time_to_quality_resumes_a_stopped_arm_from_its_last_checkpoint(tmp_path):
    """An arm killed mid-way (a session's end) goes on from its last checkpoint under --resume: its clock
    and evaluations come back from the checkpoint, so the points before it are the ones measured then,
    the clock reads on (no training counted twice), and the arm ends where an unbroken one would."""
    import os
    import signal
    import subprocess
    import time

    import torch

    runs = tmp_path / "runs"
    argv = [
        sys.executable,
        "benchmarks/time_to_quality.py",
        "--arm",
        'a=configs/scale/tiny.yaml --model.task pricing --model.task_options "{pool_size: 100}" '
        "--model.horizon 12 --trainer.max_epochs 40 --data.batches_per_epoch 40",
        "--budgets",
        "30",
        "--eval-every",
        "0.5",
        "--val-runs",
        "8",
        "--out",
        str(runs),
        "--resume",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # The first evaluation comes ~0.5 CPU-seconds in, a few steps into the mixed phase's 2-step epochs; the 39
    # epochs after the first leave seconds between it and the arm's end, so the kill below lands mid-arm
    # on an idle machine too (with 6 epochs the arm ended ~0.3 s after it, and lost the race when the CPU was free).
    first = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (list(runs.glob("a-*/version_0/checkpoints/last.ckpt")) and list(runs.glob("a-*.json"))):
        assert time.monotonic() < deadline, "no checkpoint and evaluation within 5 minutes"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # the arm and its fit, stopped after its first checkpoint
    first.wait()
    (trace,) = runs.glob("a-*.json")
    assert not json.loads(trace.read_text())["finished"], "the arm ended before it was stopped: make it longer"
    (ckpt,) = runs.glob("a-*/version_0/checkpoints/last.ckpt")
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    at_stop = saved["callbacks"]["QualityClock"]
    assert subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL).returncode == 0
    done = json.loads(trace.read_text())
    assert done["finished"] and done["steps"] > saved["global_step"]
    assert list(runs.glob("a-*/version_1/checkpoints/last.ckpt")), "the second fit resumed in a run of its own"
    points = done["points"]
    assert points[: len(at_stop["points"])] == at_stop["points"]  # the evaluations before the checkpoint, kept
    later = points[len(at_stop["points"]) :]
    assert later and all(p["step"] > saved["global_step"] for p in later)  # the training goes on after it
    assert all(p["cpu_s"] > at_stop["cpu_s"] for p in later)  # and its clock reads on from the checkpoint's
    assert [p["cpu_s"] for p in points] == sorted(p["cpu_s"] for p in points)


def test_time_to_quality_tables_and_draws_several_targets(tmp_path, capsys):
    from benchmarks.time_to_quality import first_at_most, plot_curves, print_table

    points = [{"cpu_s": 60.0 * m, "step": 100 * m, "ratio": r} for m, r in [(1, 3.0), (2, 1.8), (3, 1.4), (4, 1.6)]]
    arm = {
        "arm": "a",
        "steps": 400,
        "cpu_ms_per_step": 600.0,
        "to_target": {f"{t:g}": first_at_most(points, t) for t in (2.0, 1.5, 1.25)},
        "best": min(points, key=lambda p: p["ratio"]),
        "at_budget": {"5": points[-1]},
        "points": points,
    }
    assert arm["to_target"]["2"]["cpu_s"] == 120 and arm["to_target"]["1.5"]["cpu_s"] == 180
    assert arm["to_target"]["1.25"] is None  # never reached: the table says so, not a number
    print_table([arm], [2.0, 1.5, 1.25], [300.0])
    row = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("a "))
    assert row.split()[3:7] == ["2.0", "3.0", "-", "1.40@3m"], row
    record = {
        "arms": [arm],
        "targets": [2.0, 1.5, 1.25],
        "setting": {"task": "pricing", "task_options": {}, "horizon": 100},
    }
    plot_curves(record, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_time_to_quality_fine_tunes_from_an_earlier_arm_and_resumes_finished_arms(tmp_path, capsys):
    """``--from=ARM`` starts an arm from that arm's kept weights with its clock after that arm's training;
    ``--resume`` reuses the finished arms of the same command instead of training them again."""
    from benchmarks.time_to_quality import main

    setting = '--model.task pricing --model.task_options "{pool_size: 100}" --model.horizon 12'
    argv = [
        "--arm",
        f"a=configs/scale/tiny.yaml {setting} --trainer.max_epochs 1",
        "--arm",
        f"ft=configs/scale/tiny.yaml --config configs/finetune/regret.yaml {setting} --trainer.max_epochs 1 "
        "--data.batches_per_epoch 2 --model.finetune.rollout_envs 4 --from=a",
        "--budgets",
        "5",
        "--val-runs",
        "8",
        "--out",
        str(tmp_path / "runs"),
        "--resume",
    ]
    assert main([*argv, "--json", str(tmp_path / "first.json")]) == 0
    first = json.loads((tmp_path / "first.json").read_text())["arms"]
    parent, child = first
    assert child["from"] == "a" and child["steps"] == 2
    assert child["points"][0]["cpu_s"] > parent["points"][-1]["cpu_s"]  # its clock starts after the parent's run
    fits = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir())
    hparams = next((tmp_path / "runs").glob("ft-*/version_0/hparams.yaml")).read_text()
    assert parent["ckpt"] in hparams  # fine-tuned from the parent's kept checkpoint
    capsys.readouterr()
    assert main([*argv, "--json", str(tmp_path / "again.json")]) == 0
    assert capsys.readouterr().out.count("finished before, reused") == 2
    assert json.loads((tmp_path / "again.json").read_text())["arms"] == first
    assert sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir()) == fits  # nothing trained again


# --------------------------------------------------------------------------------------------------
# time_to_quality: every bad input one line before any work; --resume recovers from a kill at any point.
TINY_ARM = 'a=configs/scale/tiny.yaml --model.task pricing --model.task_options "{pool_size: 100}" --model.horizon 12'


def only_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("omgpt: error: "), err
    return err[0]


@pytest.mark.parametrize(
    "knob, says",
    [
        ("--threads=abc", "--arm a: --threads: must be an integer in [1, 256], got 'abc'"),
        ("--threads=0", "--arm a: --threads: must be an integer"),
        ("--sdpa=maths", "--arm a: --sdpa=maths: the one choice is --sdpa=math"),
    ],
)
def test_time_to_quality_refuses_a_bad_knob_before_any_work(knob, says, tmp_path, capsys):
    """``--threads=abc`` was a ValueError after alg-star had run; ``--sdpa=maths`` ran the fused kernel."""
    from benchmarks.time_to_quality import main

    assert main(["--arm", f"{TINY_ARM} {knob}", "--out", str(tmp_path / "o")]) == 2
    assert says in only_line(capsys)
    assert not (tmp_path / "o").exists()


def test_time_to_quality_obs_mse_refuses_an_arm_without_the_observation_head_before_training(tmp_path, capsys):
    """``--metric obs-mse`` over an arm without ``obs_head`` was a ValueError at its first evaluation."""
    from benchmarks.time_to_quality import main, parser

    argv = ["--metric", "obs-mse", "--arm", TINY_ARM, "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "--arm a: --metric obs-mse measures the observation head, and the arm trains none" in only_line(capsys)
    assert not (tmp_path / "o").exists()
    argv[3] += " --model.network.obs_head true"
    assert parser().parse_args(argv).knobs == {"a": {"compile": False, "sdpa": None, "threads": None, "from": None}}


@pytest.mark.parametrize(
    "content, says",
    [
        ('{"points": [{"cpu_s": 1.0, "step": 2, "ratio"', "not valid JSON"),  # truncated
        (b"\x80\x04\x95 a pickle", "not a text trace (binary content)"),
        ('{"points": [], "steps": 2, "finished": true, "ckpt": "x.ckpt"}', "key 'points': is empty"),
        ('{"points": [{"cpu_s": "1", "step": 2, "ratio": 1.5}], "steps": 2, "finished": true}', "points[0].cpu_s"),
        ('{"points": [{"cpu_s": 1.0, "step": 2, "ratio": 1.5}], "steps": 2, "finished": true}', "missing key 'ckpt'"),
    ],
    ids=["truncated", "binary", "finished without points", "a string clock", "finished without ckpt"],
)
def test_time_to_quality_does_not_reuse_a_damaged_trace(content, says, tmp_path, capsys):
    """A truncated trace was a JSONDecodeError under --resume, a finished one without points an
    IndexError: now such an arm is not reused (one line naming the file) and goes on from its checkpoint."""
    from benchmarks.time_to_quality import finished_trace

    trace = tmp_path / "a-123.json"
    trace.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert finished_trace(trace) is None
    printed = capsys.readouterr().out
    assert str(trace) in printed and says in printed and "not reused" in printed, printed
    point = {"cpu_s": 1.0, "step": 2, "ratio": 1.5, "regret": 3.0}
    trace.write_text(json.dumps({"points": [point], "steps": 2, "finished": False}))
    assert finished_trace(trace) is None and not capsys.readouterr().out  # stopped mid-way: resumed quietly
    trace.write_text(json.dumps({"points": [point], "steps": 2, "finished": True, "ckpt": "x.ckpt"}))
    assert finished_trace(trace)["points"] == [point]


@pytest.mark.parametrize("content", ['{"regret": 1.', b"\x80\x04 a pickle", '{"regret": "1.5"}'])
def test_time_to_quality_computes_a_damaged_alg_star_cache_again(content, tmp_path, monkeypatch, capsys):
    from benchmarks import time_to_quality as ttq

    played = []
    monkeypatch.setattr(ttq, "validation_regret", lambda *a, **k: played.append(1) or 2.5)
    setting = {"task": "newsvendor", "task_options": {}, "horizon": 3}
    assert ttq.alg_star_regret(setting, 2, 10_000, 2, tmp_path) == 2.5
    (cache,) = tmp_path.glob("alg_star_*.json")
    assert ttq.alg_star_regret(setting, 2, 10_000, 2, tmp_path) == 2.5 and len(played) == 1  # read back
    cache.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert ttq.alg_star_regret(setting, 2, 10_000, 2, tmp_path) == 2.5 and len(played) == 2
    assert f"{cache}" in capsys.readouterr().out and json.loads(cache.read_text())["regret"] == 2.5


def test_time_to_quality_names_a_truncated_or_foreign_last_ckpt(tmp_path, capsys):
    """A truncated last.ckpt under --resume said only "[Errno 22] Invalid argument"."""
    from benchmarks.time_to_quality import resumable_checkpoint
    from omgpt.entry import guarded

    import torch

    last = tmp_path / "a-123" / "version_0" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    whole = (ROOT / "pretrained" / "newsvendor" / "model.ckpt").read_bytes()
    last.write_bytes(whole[: len(whole) // 3])
    assert guarded(lambda: resumable_checkpoint(tmp_path / "a-123")) == 2
    line = only_line(capsys)
    assert f"cannot read checkpoint {last}" in line and "is the file complete?" in line, line
    torch.save({"state_dict": {}, "callbacks": {"QualityClock": {"cpu_s": "soon", "points": []}}}, last)
    assert guarded(lambda: resumable_checkpoint(tmp_path / "a-123")) == 2
    assert f"{last}: key 'callbacks.QualityClock.cpu_s': expected int or float" in only_line(capsys)
    torch.save({"state_dict": {}, "callbacks": {"QualityClock": {"cpu_s": 1.0, "wall_s": 2.0, "points": []}}}, last)
    assert resumable_checkpoint(tmp_path / "a-123") == last


def test_time_to_quality_finishes_an_arm_killed_before_its_traces_final_write(tmp_path, capsys):
    """Killed after its final checkpoint, before the trace's final write: the resumed fit has nothing
    left to train, Lightning skips the training loop and its hooks, and every --resume ended in
    ``KeyError: 'ckpt'``. Now the resumed fit finishes the trace from the checkpoint's clock."""
    from benchmarks.time_to_quality import main

    argv = [
        "--arm", f"{TINY_ARM} --trainer.max_epochs 1", "--budgets", "5", "--val-runs", "8",
        "--out", str(tmp_path / "runs"), "--resume",
    ]  # fmt: skip
    assert main([*argv, "--json", str(tmp_path / "first.json")]) == 0
    (first,) = json.loads((tmp_path / "first.json").read_text())["arms"]
    (trace,) = (tmp_path / "runs").glob("a-*.json")
    stopped = json.loads(trace.read_text())
    stopped["finished"] = False
    del stopped["ckpt"]
    trace.write_text(json.dumps(stopped))  # as the trace was before its final write
    capsys.readouterr()
    assert main([*argv, "--json", str(tmp_path / "again.json")]) == 0
    (again,) = json.loads((tmp_path / "again.json").read_text())["arms"]
    assert list((tmp_path / "runs").glob("a-*/version_1")), "the arm's fit resumed"
    assert json.loads(trace.read_text())["finished"] and again["ckpt"] == first["ckpt"]
    assert again["steps"] == first["steps"] and [p["step"] for p in again["points"]] == [
        p["step"] for p in first["points"]
    ]
    assert [p["ratio"] for p in again["points"]] == pytest.approx([p["ratio"] for p in first["points"]])
