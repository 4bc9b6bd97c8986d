"""OMGPT: a sequence-modeling framework for data-driven operational decision making.

Public entry points: :func:`omgpt.tasks.make_task`, :func:`omgpt.rollout.rollout`,
:func:`omgpt.policies.make_policy`, :class:`omgpt.model.GPT`, :class:`omgpt.module.OMGPTModule`;
to use a trained model anywhere, :func:`omgpt.load_model` and :class:`omgpt.Agent` (no Lightning), and
the Gymnasium environments ``gymnasium.make("omgpt/<task>-v0")`` that importing ``omgpt`` registers
(:mod:`omgpt.envs`).
"""
__version__ = "0.1.0"

from omgpt.threads import passive_on_the_command_line

passive_on_the_command_line()  # before register_envs imports torch: OpenMP reads its wait policy once, as torch loads

from omgpt.envs.registration import register_envs

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
