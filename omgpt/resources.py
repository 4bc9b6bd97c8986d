"""Where the project's shipped files are: the YAML configs and the benchmark scripts.

In a source checkout (an editable install, or the repository on ``PYTHONPATH``) they are the
repository's ``configs/`` and ``benchmarks/`` folders, next to the ``omgpt`` package. A regular
(non-editable) install carries copies inside the package, ``omgpt/_configs`` and
``omgpt/_benchmarks`` (``pyproject.toml`` maps them), so ``omgpt fit``, ``omgpt demo`` and
``omgpt bench`` find the same files there.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent  # the repository root, in a source checkout


def _shipped(folder: str) -> Path:
    source = CHECKOUT / folder
    return source if source.is_dir() else PACKAGE / f"_{folder}"


CONFIGS = _shipped("configs")
BENCHMARKS = _shipped("benchmarks")
