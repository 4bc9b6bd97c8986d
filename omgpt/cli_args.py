"""What the ``omgpt`` subcommands share on the command line: an argument parser whose errors are one
line and exit code 2, and ``--option KEY=VALUE`` task options.

A command-line module: the library never imports it.
"""
from __future__ import annotations

import argparse

from omgpt.errors import OMGPTError


def task_options(pairs: list[str]) -> dict:
    """``["pool_size=4", "censored=true"]`` -> ``{"pool_size": 4, "censored": True}`` (YAML scalars)."""
    import yaml

    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise OMGPTError(f"--option expects KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(value)  # the values themselves are checked by make_task
        except yaml.YAMLError:
            raise OMGPTError(f"--option {pair!r}: the value is not valid YAML") from None
    return out


class Parser(argparse.ArgumentParser):
    """argparse, with errors as one line and exit code 2 (argparse's default prints the usage too)."""

    def error(self, message: str):
        raise OMGPTError(f"{self.prog}: {message}")
