"""Every decision maker behind one interface (see ``base.py``)."""
from omgpt.policies.base import POLICIES, HistoryPolicy, Policy, make_policy, policies_for, register_policy
from omgpt.policies import oracle  # noqa: F401  (registers oracle, noisy-oracle)
from omgpt.policies import newsvendor, pricing  # noqa: F401  (registers erm, fai, ilse, cils)

__all__ = ["POLICIES", "HistoryPolicy", "Policy", "make_policy", "policies_for", "register_policy"]
from omgpt.policies import gpt  # noqa: F401,E402
