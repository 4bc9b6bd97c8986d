"""Every decision maker behind one interface (see ``base.py``). Every module of this package is
imported here, so adding a policy is adding a file that decorates its class with ``@register_policy``."""
import importlib
import pkgutil

from omgpt.policies.base import POLICIES, HistoryPolicy, Policy, make_policy, policies_for, register_policy

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["POLICIES", "HistoryPolicy", "Policy", "make_policy", "policies_for", "register_policy"]
