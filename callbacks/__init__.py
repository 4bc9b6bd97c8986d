"""Lightning callbacks: the horizon curriculum and Algorithm 1's self-rollout refresh. (The probing
callback, which runs the analysis, is ``analysis.embedding_probe.EmbeddingProbe``: it sits above.)"""
from callbacks.curriculum import HorizonCurriculum
from callbacks.self_rollout import SelfRolloutRefresh

__all__ = ["HorizonCurriculum", "SelfRolloutRefresh"]
