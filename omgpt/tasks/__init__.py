"""Decision tasks: one file per problem, all registered by name (see ``base.py``)."""
from omgpt.tasks.base import TASKS, Envs, Scaling, Task, make_task, register
from omgpt.tasks import newsvendor, pricing  # noqa: F401  (registers the tasks)

__all__ = ["TASKS", "Envs", "Scaling", "Task", "make_task", "register"]
