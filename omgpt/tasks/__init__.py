"""Decision tasks: one file per problem, each registering its names with ``@register`` (see
``base.py``). Every module of this package is imported here, so adding a task is adding a file."""
import importlib
import pkgutil

from omgpt.tasks.base import TASKS, Envs, Scaling, Task, make_episode_task, make_task, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["TASKS", "Envs", "Scaling", "Task", "make_episode_task", "make_task", "register"]
