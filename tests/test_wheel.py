"""The wheel a user installs: its only top-level name is ``omgpt``, and it works away from the checkout.

Built from a copy of the repository (an in-tree build would leave ``build/`` and ``*.egg-info`` in the
checkout), installed into a fresh venv that sees the dependencies but not the source tree, then run
from a folder outside the checkout: ``omgpt evaluate`` on a copy of a reference model, and
``omgpt experiment --list`` (which reads the configs the wheel ships in ``omgpt/_configs``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_BUILD_INPUTS = {
    ".git",
    ".venv",
    "results",
    "pretrained",
    "build",
    "runs",
    "lightning_logs",
}  # at the top level only


def copy_of_the_tree(dest: Path) -> Path:
    """The repository without its VCS data, venv, outputs and caches: tools/, tests/ and examples/ stay,
    so the wheel's contents show what pyproject.toml selects, not what happened to be copied."""

    def skip(folder: str, names: list[str]) -> set[str]:
        top = NOT_BUILD_INPUTS if Path(folder) == ROOT else set()
        return {n for n in names if n in top or n == "__pycache__" or n.endswith(".egg-info")}

    return Path(shutil.copytree(ROOT, dest, ignore=skip))


def run(args: list, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_the_wheel_holds_only_omgpt_and_its_commands_run_without_the_checkout(tmp_path):
    # Build (pip's build isolation fetches setuptools from the package index if need be).
    checkout = sorted(os.listdir(ROOT))
    src = copy_of_the_tree(tmp_path / "src")
    run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", src, "-w", tmp_path / "dist"],
        cwd=tmp_path,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    dist_info = [t for t in top if t.endswith(".dist-info")]
    assert len(dist_info) == 1 and dist_info[0].startswith("omgpt_ops-"), top
    assert top == {"omgpt", *dist_info}, top
    for shipped in (
        "omgpt/callbacks/checkpoint.py",
        "omgpt/datamodules/history.py",
        "omgpt/analysis/report.py",
        "omgpt/commands/experiment/__init__.py",
        "omgpt/_configs/base.yaml",
        "omgpt/_benchmarks/kv_cache.py",
    ):
        assert shipped in names, shipped
    assert sorted(os.listdir(ROOT)) == checkout, "the build left files in the checkout"

    # A fresh venv. Its one .pth line per dependency folder of this interpreter (site-packages, and
    # what those folders' own .pth files added) lets it import torch, lightning, ...; a folder added
    # by a .pth line has its own .pth files ignored, so the editable install's import hook (a .pth in
    # this interpreter's site-packages) never runs there, and the checkout is not on the path.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(
        run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).stdout.strip()
    )
    deps = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    assert deps and not any(Path(p).resolve() == ROOT for p in deps)
    (site / "dependencies.pth").write_text("".join(f"{p}\n" for p in deps))
    # --ignore-installed: install here even where an editable omgpt-ops is visible through the .pth
    run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed", wheel],
        cwd=tmp_path,
    )

    # The installed package, not the source tree, is what the venv imports.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import sys, omgpt.commands.cli, omgpt.callbacks, omgpt.datamodules, omgpt.analysis, omgpt.resources as r\n"
        "print(r.CONFIGS)\n"
        "print(*sorted({m.__file__ for n, m in sys.modules.items() if n.startswith('omgpt') and getattr(m, '__file__', None)}), sep='\\n')\n"
        "import importlib.util as u\n"
        "print(*[n for n in ('tools', 'benchmarks', 'callbacks', 'analysis') if u.find_spec(n)])"
    )
    configs, *files, outside = run([python, "-c", probe], cwd=elsewhere).stdout.splitlines()
    assert Path(configs) == site / "omgpt" / "_configs"
    assert files and all(Path(f).is_relative_to(site / "omgpt") for f in files), files
    assert outside == "", f"the checkout's top-level folders are importable: {outside}"

    # The commands, from a folder outside the checkout.
    model = tmp_path / "newsvendor"
    model.mkdir()
    shutil.copy(ROOT / "pretrained" / "newsvendor" / "model.ckpt", model)
    omgpt = env_dir / "bin" / "omgpt"
    run(
        [
            omgpt,
            "evaluate",
            "--ckpt",
            model,
            "--policies",
            "omgpt,erm",
            "--runs",
            "4",
            "--horizon",
            "10",
            "--out",
            "evaluate",
            "--no-progress",
        ],
        cwd=elsewhere,
    )
    summary = json.loads((elsewhere / "evaluate" / "summary.json").read_text())
    assert set(summary["policies"]) == {"omgpt", "erm"}
    listed = run([omgpt, "experiment", "--list"], cwd=elsewhere).stdout
    assert "main-results" in listed and "distribution-shift" in listed
