"""The formatter and the linter pass on the whole tree (issue 35; their settings: ``[tool.ruff]`` in
pyproject.toml): unformatted code or a lint error fails the suite, so CI. ruff is a dev dependency."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_passes_on_the_tree(args):
    done = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)
    assert "No module named ruff" not in done.stderr, (
        "ruff is missing: it is a dev dependency (pip install -e '.[dev]')"
    )
    assert done.returncode == 0, f"ruff {' '.join(args)}:\n{done.stdout}{done.stderr}"
