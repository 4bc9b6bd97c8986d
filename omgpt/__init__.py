"""OMGPT: a sequence-modeling framework for data-driven operational decision making.

Public entry points: :func:`omgpt.tasks.make_task`, :func:`omgpt.rollout.rollout`,
:func:`omgpt.policies.make_policy`, :class:`omgpt.model.GPT`, :class:`omgpt.module.OMGPTModule`;
to use a trained model anywhere, :func:`omgpt.load_model` and :class:`omgpt.Agent` (no Lightning), and
the Gymnasium environments ``gymnasium.make("omgpt/<task>-v0")`` that importing ``omgpt`` registers
(:mod:`omgpt.envs`).
"""

__version__ = "0.1.0"

import os as _os
import signal as _signal
import sys as _sys


def _interrupted_while_starting(signum, frame) -> None:
    """Ctrl-C while the ``omgpt`` command imports torch and Lightning (seconds): one line and exit 130,
    as :func:`omgpt.commands.cli.cli_main` ends an interrupted command -- nothing is written yet."""
    _sys.stderr.write("omgpt: interrupted\n")
    _os._exit(128 + _signal.SIGINT)


# The omgpt command (`python -m omgpt`: its package imports under argv ['-m']; the console script) gets
# its Ctrl-C handler before the heavy imports below; cli_main hands SIGINT back to Python's
# KeyboardInterrupt once it runs. A library import never touches SIGINT, nor does an ignored one change.
if (_sys.argv[:1] == ["-m"] or _os.path.basename(_sys.argv[0] if _sys.argv else "") == "omgpt") and _signal.getsignal(
    _signal.SIGINT
) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)

from omgpt.threads import passive_on_the_command_line  # noqa: E402

passive_on_the_command_line()  # before register_envs imports torch: OpenMP reads its wait policy once, as torch loads

from omgpt.envs.registration import register_envs  # noqa: E402

register_envs()  # cheap: names and entry-point strings; an environment's module loads when one is made

_LAZY = {"Agent": "omgpt.agent", "load_model": "omgpt.model"}  # imported on first use, so `import omgpt` stays light
__all__ = ["Agent", "load_model", "register_envs", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
