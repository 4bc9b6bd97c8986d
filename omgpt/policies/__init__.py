"""Every decision maker behind one interface (see ``base.py``). Every module of this package is
imported here, so adding a policy is adding a file that decorates its class with ``@register_policy``;
a policy with a ``tunable`` grid also gets its ``<name>-tuned`` variant (``tuned.py``)."""

import importlib
import pkgutil

from omgpt.policies.base import POLICIES, HistoryPolicy, Policy, make_policy, policies_for, register_policy
from omgpt.policies.tuned import register_tuned_variants

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "tuned"):
        importlib.import_module(f"{__name__}.{_module.name}")
register_tuned_variants()

__all__ = ["POLICIES", "HistoryPolicy", "Policy", "make_policy", "policies_for", "register_policy"]
