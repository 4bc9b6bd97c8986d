"""Maintenance tools of the repository, run from a checkout as ``python -m tools.NAME`` (not installed):

* ``reference_models``: train, card and re-test the shipped reference models (``pretrained/``);
* ``recipe``: the CPU-recipe study (``results/recipe/``);
* ``readme_tables``: regenerate the tables of the README and ``docs/`` from the JSON in ``results/`` and ``configs/tuned``;
* ``reproduce_experiments``: re-run the committed experiments' evaluation and check every number;
* ``interpretability_train`` / ``interpretability_evidence``: the models and the evidence of
  ``results/interpretability/``.

Tools sit above the commands: they may import anything in ``omgpt``; nothing in ``omgpt`` imports them.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

from omgpt.errors import OMGPTError


def tool_main(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """A tool's ``main(argv)`` that ends a user's error as the CLI does: one line ``omgpt: error: ...``
    on stderr and exit code 2 (argparse's own errors exit 2 as well). Each tool checks every argument
    before it writes anything, so an error leaves every file as it was."""

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except OMGPTError as e:
            lines = str(e).strip().splitlines() or [type(e).__name__]
            print(f"omgpt: error: {lines[0]}", file=sys.stderr)
            return 2

    return wrapped
