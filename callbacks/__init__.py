"""Lightning callbacks: the horizon curriculum, Algorithm 1's self-rollout refresh (and probes)."""
from callbacks.curriculum import HorizonCurriculum
from callbacks.embedding_probe import EmbeddingProbe
from callbacks.self_rollout import SelfRolloutRefresh

__all__ = ["EmbeddingProbe", "HorizonCurriculum", "SelfRolloutRefresh"]
