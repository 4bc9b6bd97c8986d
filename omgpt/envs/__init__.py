"""Gymnasium environments for every task (``gymnasium.make("omgpt/<task>-v0", **options)``, and the
batched ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``): see :mod:`omgpt.envs.env`
for what they observe, play, reward and how their seeds map to :func:`omgpt.rollout.rollout`."""

from omgpt.envs.registration import NAMESPACE, env_id, register_envs

__all__ = ["NAMESPACE", "OMGPTEnv", "OMGPTVectorEnv", "env_id", "register_envs"]


def __getattr__(name: str):
    # The environments' module loads when it is first needed (gymnasium.make does it by the entry
    # point), so that `import omgpt`, which registers the ids, stays light.
    if name in ("OMGPTEnv", "OMGPTVectorEnv", "Episodes"):
        from omgpt.envs import env

        return getattr(env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
