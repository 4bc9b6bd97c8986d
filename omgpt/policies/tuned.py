"""``<name>-tuned``: every benchmark with free constants (a ``tunable`` grid) played with the constants
chosen for its setting on validation environments (:mod:`omgpt.tuning`, written by ``omgpt tune``).

The variant is the benchmark's own class built with those constants, so it is the same algorithm: only
the numbers differ. It needs the episode horizon when it is built (the constants are tuned per
horizon); :func:`~omgpt.policies.make_policy` passes it. A setting never tuned is one line naming the
``omgpt tune`` command to run.
"""

from __future__ import annotations

from omgpt.errors import OMGPTError
from omgpt.policies.base import POLICIES, register_policy
from omgpt.tuning import tuned_constants


def tuned_variant(base_name: str, base: type) -> type:
    """A subclass of ``base`` whose constructor reads its constants from the setting's tuned file."""

    class Tuned(base):
        tunable = {}

        def __init__(self, task, horizon: int | None = None, tuned_on: str | None = None):
            if horizon is None:
                raise OMGPTError(f"{base_name}-tuned needs the episode horizon (its constants are tuned per horizon)")
            self.constants = tuned_constants(
                base_name, task.name, task.options(), horizon, tuned_on, names=tuple(base.tunable)
            )
            super().__init__(task, **self.constants)

    Tuned.__name__ = Tuned.__qualname__ = f"{base.__name__}Tuned"
    Tuned.__doc__ = (
        f"``{base_name}`` with its constants ({', '.join(base.tunable)}) tuned on validation environments.\n\n"
        "Args:\n    horizon: the episode length the constants were tuned for.\n"
        "    tuned_on: a setting key (``configs/tuned/<key>.json``) to read instead of the task's own."
    )
    return Tuned


def plays_as_base(policy) -> bool:
    """Whether a ``-tuned`` policy's constants are its base benchmark's own (the paper's), so that it
    plays exactly as the base does: same class, same numbers, same generator draws. The evaluation
    then reuses the base's rollout instead of repeating it (ERM's LPs make that worth it)."""
    base = type(policy).__mro__[1]
    if not getattr(policy, "constants", None) or not base.tunable:
        return False
    reference = base(policy.task)
    return all(getattr(policy, k) == getattr(reference, k) for k in base.tunable)


def register_tuned_variants() -> None:
    """Register ``<name>-tuned`` for every registered policy with a ``tunable`` grid (called once all
    policy modules are imported)."""
    for name, (cls, applies) in list(POLICIES.items()):
        if cls.tunable and not name.endswith("-tuned"):
            register_policy(f"{name}-tuned", applies=applies)(tuned_variant(name, cls))


def with_tuned_variants(policies: list[str]) -> list[str]:
    """``policies`` with ``<name>-tuned`` after every benchmark that has free constants: every panel
    plays both, and its best benchmark is the variant of lower validation regret (docs/protocol.md)."""
    out = []
    for name in policies:
        out.append(name)
        tuned = f"{name}-tuned"
        if name in POLICIES and POLICIES[name][0].tunable and tuned not in policies:
            out.append(tuned)
    return out
