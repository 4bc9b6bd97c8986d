"""Decision tasks: one file per problem, each registering its names with ``@register`` (see
``registry.py``). Every task module of this package is imported here, so adding a task is adding a file."""

import importlib
import pkgutil

from omgpt.tasks.base import Envs, Scaling, Task
from omgpt.tasks.registry import TASKS, make_episode_task, make_task, register

SHARED = {"base", "registry", "mixins", "densities"}  # the API and helpers, not tasks

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in SHARED:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["TASKS", "Envs", "Scaling", "Task", "make_episode_task", "make_task", "register"]
