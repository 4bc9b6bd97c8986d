"""OMGPT: a sequence-modeling framework for data-driven operational decision making.

Public entry points: :func:`omgpt.tasks.make_task`, :func:`omgpt.rollout.rollout`,
:func:`omgpt.policies.make_policy`, :class:`omgpt.model.GPT`, :class:`omgpt.module.OMGPTModule`.
"""
__version__ = "0.1.0"
