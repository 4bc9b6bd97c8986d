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


def code_version() -> str:
    """The package version, plus the commit (``+g<sha>``, ``.dirty`` with uncommitted changes) in a
    source checkout: recorded in every output so that a number can be traced to the code behind it."""
    import subprocess

    from omgpt import __version__

    if not (CHECKOUT / ".git").exists():
        return __version__
    try:
        sha = subprocess.run(
            ["git", "-C", str(CHECKOUT), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(CHECKOUT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{sha}{'.dirty' if dirty else ''}" if sha else __version__
