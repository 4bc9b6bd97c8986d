"""Lightning callbacks: the parts of Algorithm 1 (the horizon curriculum, the mixed phase's self-rollout
refreshes), the probing analyses during a fit, and the checkpoint rule with ``last.ckpt`` at every
validation. Each is named once in ``configs/trainer/callback/``."""

from omgpt.callbacks.checkpoint import ResumableCheckpoint
from omgpt.callbacks.curriculum import Curriculum
from omgpt.callbacks.probing import EmbeddingProbe
from omgpt.callbacks.self_rollout import SelfRolloutRefresh

__all__ = ["Curriculum", "EmbeddingProbe", "ResumableCheckpoint", "SelfRolloutRefresh"]
