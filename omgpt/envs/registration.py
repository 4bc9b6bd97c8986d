"""``gymnasium.make("omgpt/<task>-v0")`` for every registered task: the registration ``import omgpt`` runs.

Registering is cheap: a name, an entry-point string and the task's name per task; the environment's
module (:mod:`omgpt.envs.env`) is imported by Gymnasium when an environment is made. Neither imports
Lightning.
"""

from __future__ import annotations

import gymnasium

from omgpt.tasks import TASKS

NAMESPACE = "omgpt"


def env_id(task: str) -> str:
    """The Gymnasium id of a task's environment, ``omgpt/<task>-v0``."""
    return f"{NAMESPACE}/{task}-v0"


def register_envs() -> list[str]:
    """Register the environment of every task in :data:`omgpt.tasks.TASKS` not registered yet, and
    return the new ids. Importing ``omgpt`` calls it; call it again after registering a task of your
    own (``examples/logit_pricing.py``) to make it a Gymnasium environment too."""
    new = [name for name in TASKS if env_id(name) not in gymnasium.registry]
    for name in new:
        gymnasium.register(
            env_id(name),
            entry_point="omgpt.envs.env:OMGPTEnv",
            vector_entry_point="omgpt.envs.env:OMGPTVectorEnv",
            kwargs={"task": name},
        )
    return [env_id(name) for name in new]
