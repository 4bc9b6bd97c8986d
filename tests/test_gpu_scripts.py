"""The GPU scripts (benchmarks/gpu_check.sh, gpu_pools.sh, gpu_env.sh) refuse a machine without a CUDA
GPU in one line and exit 2 before they write anything (gpu_pools.sh once trained the paper's network in
bf16 on the CPU until its cap; gpu_check.sh ran every step into a refusal and exited 0). gpu_pools.sh's
dry run still runs, ends only the GPU monitor it started (it ran ``pkill -f "nvidia-smi --query-gpu"``)
and removes its work folder. Nothing trains here: ``python3 -m omgpt fit`` is a stub that exits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omgpt.resources import CHECKOUT


def fake_bin(tmp_path: Path, nvidia_smi: str) -> Path:
    """A PATH folder whose python3 is this interpreter except for ``-m omgpt fit`` (a stub), and whose
    nvidia-smi runs ``nvidia_smi`` (a machine with or without a GPU, as the test wants)."""
    bin = tmp_path / "bin"
    bin.mkdir(exist_ok=True)
    (bin / "python3").write_text(
        f'#!/usr/bin/env bash\n[ "$1 $2 $3" = "-m omgpt fit" ] && {{ echo "stub fit"; exit 0; }}\nexec {sys.executable} "$@"\n'
    )
    (bin / "nvidia-smi").write_text(f"#!/usr/bin/env bash\n{nvidia_smi}\n")
    for f in bin.iterdir():
        f.chmod(0o755)
    return bin


def run(script: str, tmp_path: Path, *args: str, nvidia_smi: str = "exit 9", **env: str) -> subprocess.CompletedProcess:
    bin = fake_bin(tmp_path, nvidia_smi)
    mine = {k: v for k, v in os.environ.items() if k not in ("LOG", "DRY_RUN", "ORDER")}  # only what the test says
    full = {**mine, "PATH": f"{bin}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"), **env}
    return subprocess.run(
        ["bash", f"benchmarks/{script}", *args], cwd=CHECKOUT, env=full, capture_output=True, text=True, timeout=120
    )


def refused(p: subprocess.CompletedProcess, says: str) -> bool:
    lines = p.stderr.strip().splitlines()
    return p.returncode == 2 and len(lines) == 1 and says in lines[0]


@pytest.mark.parametrize("script", ["gpu_check.sh", "gpu_pools.sh", "gpu_env.sh"])
def test_no_gpu_is_one_line_and_exit_2_before_anything_is_written(tmp_path, script):
    p = run(script, tmp_path, TMPDIR=str(tmp_path))
    assert refused(p, f"{script}: error: no CUDA GPU on this machine"), p.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("pools.*")) and p.stdout == ""


def test_bad_arguments_are_refused_before_the_gpu_is_looked_for(tmp_path):
    assert refused(run("gpu_check.sh", tmp_path, "alg-starr"), "unknown argument alg-starr")
    assert refused(run("gpu_pools.sh", tmp_path, ORDER="mab-100 pricing-10"), "ORDER: no arm pricing-10")
    assert not (tmp_path / "out").exists()


def test_gpu_env_without_log_sets_up_and_logs_to_stdout(tmp_path):
    p = run("gpu_env.sh", tmp_path, DRY_RUN="1")
    assert p.returncode == 0 and "torch" in p.stdout and "lightning" in p.stdout, p.stderr


def test_a_dry_run_ends_only_its_own_monitor_and_removes_its_work_folder(tmp_path):
    # someone else's monitor, named as gpu_pools.sh's is: it must outlive the run
    other = subprocess.Popen(["bash", "-c", 'exec -a "nvidia-smi --query-gpu=utilization.gpu" sleep 120'])
    try:
        p = run(
            "gpu_pools.sh",
            tmp_path,
            # -L answers a GPU; the monitor (--query-gpu ... -l 30) notes its PID and runs until killed
            nvidia_smi=f'[ "$1" = -L ] && {{ echo "GPU 0: stub"; exit 0; }}; echo $$ >>{tmp_path}/monitor.pid; exec sleep 120',
            DRY_RUN="1",
            ORDER="pricing-100",
            TMPDIR=str(tmp_path),
        )
        assert p.returncode == 0, p.stderr
        log = (tmp_path / "out" / "gpu_pools.log").read_text()
        assert "fit pricing-100: exit 0" in log and "pricing-100: no checkpoint to play" in log and "done" in log
        assert (tmp_path / "out" / "pools.tar.gz").is_file()
        assert not list(tmp_path.glob("pools.*"))  # the work folder went at the end
        assert other.poll() is None  # another's monitor still runs
        (monitor,) = map(int, (tmp_path / "monitor.pid").read_text().split())
        time.sleep(0.5)  # (reaped by init once its parent, the script, is gone)
        with pytest.raises(ProcessLookupError):  # its own: ended
            os.kill(monitor, 0)
    finally:
        other.kill()
